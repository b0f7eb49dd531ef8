//! Captures that memtape's own old versions wrote, read with today's reader and reports.
//!
//! `tests/fixtures/old_captures/` holds captures of its `program.py` in format versions 1,
//! 2 and 3 (2 and 3 also with native stacks), each made by `memtape run` of the last
//! commit that wrote that version, and what that commit's `memtape stats` and `memtape
//! top` printed about them (its README.md says how). The values expected here are those
//! reports' ([`super::old_files`]), and what the program makes certain: the blocks it
//! allocates, their sizes and the lines that allocate them.

use std::collections::HashMap;

use super::super::*;
use super::old_files::{OldFile, MMAP_SO, MMAP_SO_BUILD_ID, OLD_FILES, PROGRAM};
use super::owned::{read_ok, Owned};
use crate::memory_source::{MemorySource, NATIVE_DOMAIN};
use crate::report::{frame_location, group_sites, Analysis, Analyzed, ReplayOptions, Site};
use crate::GroupBy;

/// An old file read with today's reader the way `memtape stats` reads it (the two-thread
/// reader, into an [`Analysis`]), with a copy of every record and the block it came in.
struct Opened {
    version: u16,
    metadata: String,
    summary: ReadSummary,
    records: Vec<Owned>,
    block_of: Vec<u64>,
    analyzed: Analyzed,
}

struct Keeping {
    analysis: Analysis,
    records: Vec<Owned>,
    block_of: Vec<u64>,
    block: u64,
}

impl Keeping {
    fn keep(&mut self, record: Owned) {
        self.records.push(record);
        self.block_of.push(self.block);
    }
}

impl<'a> RecordVisitor<'a> for Keeping {
    fn alloc(&mut self, domain: u32, addr: u64, size: u64, stack: u32) {
        self.analysis.alloc(domain, addr, size, stack);
        self.keep(Owned::Alloc {
            domain,
            addr,
            size,
            stack,
        });
    }

    fn free(&mut self, domain: Option<u32>, addr: u64) {
        self.analysis.free(domain, addr);
        self.keep(Owned::Free { domain, addr });
    }

    fn record(&mut self, record: Record<'a>) {
        self.analysis.record(record);
        self.keep(record.into());
    }

    fn events(&mut self, events: &[HeapEvent]) {
        self.analysis.events(events);
        for event in events {
            self.keep(match *event {
                HeapEvent::Alloc {
                    domain,
                    stack,
                    addr,
                    size,
                } => Owned::Alloc {
                    domain,
                    addr,
                    size,
                    stack,
                },
                HeapEvent::Free { domain, addr } => Owned::Free { domain, addr },
            });
        }
    }

    fn block_end(&mut self) {
        self.block += 1;
    }
}

fn open(file: &OldFile) -> Opened {
    let mut reader = CaptureReader::new(file.bytes).unwrap();
    let mut keeping = Keeping {
        analysis: Analysis::new(ReplayOptions::default()),
        records: Vec::new(),
        block_of: Vec::new(),
        block: 0,
    };
    let summary = reader.visit_records_pipelined(&mut keeping).unwrap();
    // On one thread, and record by record, the same records and the same analysis.
    assert_eq!(
        read_ok(file.bytes),
        (keeping.records.clone(), summary.clone())
    );
    let mut analyzed = keeping.analysis.finish();
    let mut by_record = Analysis::new(ReplayOptions::default());
    CaptureReader::new(file.bytes)
        .unwrap()
        .for_each_record(|record| by_record.feed(&record))
        .unwrap();
    assert_eq!(by_record.finish().result, analyzed.result, "{}", file.name);
    analyzed
        .symbols
        .hide_launcher_frames(file.launcher_files.map(str::to_owned).to_vec());
    Opened {
        version: reader.version(),
        metadata: reader.metadata_json().to_owned(),
        summary,
        records: keeping.records,
        block_of: keeping.block_of,
        analyzed,
    }
}

/// The string, frame and stack tables as recorded, native frames unsymbolized.
#[derive(Default)]
struct Tables {
    strings: HashMap<u32, String>,
    frames: HashMap<u32, (u32, u32, u32)>,
    stacks: HashMap<u32, (u32, u32)>,
    modules: Vec<(u32, String, Vec<u8>)>,
    native_frames: HashMap<u32, (u32, u64)>,
}

impl Tables {
    fn of(records: &[Owned]) -> Self {
        let mut t = Tables::default();
        for record in records {
            match record {
                Owned::String(id, value) => {
                    t.strings.insert(*id, value.clone());
                }
                Owned::Frame(id, filename, name, line) => {
                    t.frames.insert(*id, (*filename, *name, *line));
                }
                Owned::Stack(id, parent, frame) => {
                    t.stacks.insert(*id, (*parent, *frame));
                }
                Owned::Module(id, path, _, build_id, _) => {
                    t.modules.push((*id, path.clone(), build_id.clone()));
                }
                Owned::NativeFrame(id, module, offset) => {
                    t.native_frames.insert(*id, (*module, *offset));
                }
                _ => {}
            }
        }
        t
    }

    /// Every frame of `stack`, innermost first: Python ones as `file:line in function`,
    /// native ones as `module+0xoffset`.
    fn stack(&self, mut stack: u32) -> Vec<String> {
        let mut out = Vec::new();
        while stack != 0 {
            let (parent, frame) = self.stacks[&stack];
            out.push(match self.frames.get(&frame) {
                Some((filename, name, line)) => format!(
                    "{}:{line} in {}",
                    self.strings[filename], self.strings[name]
                ),
                None => {
                    let (module, offset) = self.native_frames[&frame];
                    let path = &self.modules.iter().find(|m| m.0 == module).unwrap().1;
                    format!("{path}+{offset:#x}")
                }
            });
            stack = parent;
        }
        out
    }
}

/// The one allocation `matches` picks (by domain and size), at its index.
fn only_alloc(records: &[Owned], matches: impl Fn(u32, u64) -> bool) -> (usize, u64, u32) {
    let found: Vec<(usize, u64, u32)> = records
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match *r {
            Owned::Alloc {
                domain,
                addr,
                size,
                stack,
            } if matches(domain, size) => Some((i, addr, stack)),
            _ => None,
        })
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found[0]
}

/// The index of the first record after `after` that frees `addr` (or allocates over it).
fn next_at(records: &[Owned], after: usize, addr: u64) -> Option<usize> {
    records[after + 1..]
        .iter()
        .position(|r| match *r {
            Owned::Free { addr: a, .. } | Owned::Alloc { addr: a, .. } => a == addr,
            _ => false,
        })
        .map(|i| after + 1 + i)
}

/// `frames` of the program, then the launcher's.
fn with_launcher(file: &OldFile, frames: &[String]) -> Vec<String> {
    let mut all = frames.to_vec();
    all.extend(file.launcher_frames.map(str::to_owned));
    all
}

fn program(lines: &[(u32, &str)]) -> Vec<String> {
    lines
        .iter()
        .map(|(line, function)| format!("{PROGRAM}:{line} in {function}"))
        .collect()
}

#[test]
fn old_files_read_whole_with_their_version() {
    for file in &OLD_FILES {
        let opened = open(file);
        assert_eq!(opened.version, file.version, "{}", file.name);
        let ReadSummary {
            blocks,
            records,
            events,
            complete,
            cut_short_at,
            trailer_json,
            damage,
        } = opened.summary;
        assert_eq!(
            (
                blocks,
                records,
                events,
                complete,
                cut_short_at,
                damage.len()
            ),
            (
                file.blocks,
                file.records,
                file.reports.events,
                true,
                None,
                0
            ),
            "{}",
            file.name
        );
        let trailer = trailer_json.unwrap();
        let events_in_trailer = format!(r#"{{"events": {events}, "#);
        assert!(trailer.starts_with(&events_in_trailer), "{trailer}");
        assert!(
            trailer.contains(r#""exit": "normal", "exit_code": 0"#),
            "{trailer}"
        );
        let quoted = file.launcher_files.map(|f| format!("\"{f}\""));
        let launcher_files = format!(r#"{{"launcher_files": [{}], "#, quoted.join(", "));
        assert!(
            opened.metadata.starts_with(&launcher_files),
            "{}: {}",
            file.name,
            opened.metadata
        );
        assert!(
            opened
                .metadata
                .contains(r#""argv": ["program.py"], "command": "script", "python": "3.11.7""#),
            "{}: {}",
            file.name,
            opened.metadata
        );
    }
}

#[test]
fn totals_peak_and_end_are_what_the_old_versions_reported() {
    for file in &OLD_FILES {
        let result = open(file).analyzed.result;
        let old = &file.reports;
        assert_eq!(result.events, old.events, "{}", file.name);
        assert_eq!(result.totals, old.totals, "{}", file.name);
        assert_eq!(result.peak, old.peak, "{}", file.name);
        assert_eq!(
            (
                result.end_bytes,
                result.end_blocks,
                result.end_by_source.get(MemorySource::Native)
            ),
            old.end,
            "{}",
            file.name
        );
        assert_eq!(
            result.end_by_source.get(MemorySource::Python),
            old.end.0 - old.end.2,
            "{}",
            file.name
        );
        assert_eq!(
            result.peak_by_source.get(MemorySource::Python),
            old.peak.bytes,
            "{}",
            file.name
        );
        assert_eq!(result.duration_ns, old.duration_ns, "{}", file.name);
        assert_eq!(result.dropped, 0, "{}", file.name);
        let markers: Vec<_> = result
            .markers
            .iter()
            .map(|m| (m.label.as_str(), m.time_ns, m.event_index))
            .collect();
        assert_eq!(
            markers,
            [("scratch freed", old.marker.0, old.marker.1)],
            "{}",
            file.name
        );
    }
}

/// Where today's reports put each site: bytes, blocks and its frames as shown.
fn shown(sites: &[Site]) -> Vec<(u64, u64, Vec<String>)> {
    sites
        .iter()
        .map(|s| {
            (
                s.bytes,
                s.count,
                s.frames.iter().map(frame_location).collect(),
            )
        })
        .collect()
}

#[test]
fn top_sites_are_what_the_old_versions_reported() {
    for file in &OLD_FILES {
        let Analyzed { symbols, result } = open(file).analyzed;
        // Native frames are named from their modules' files where this machine has them
        // (the same builds), as the old versions named them; else module+offset.
        let notes = symbols.native_notes().to_vec();
        let symbolized = |module: &str| {
            !notes
                .iter()
                .any(|n| n.contains(&format!("frames in {module} are")))
        };
        let old = &file.reports;
        for (table, top, count) in [
            (&result.live_at_peak, &old.top_at_peak, old.sites_at_peak),
            (&result.live_at_end, &old.top_at_end, old.sites_at_end),
        ] {
            let sites = group_sites(table, &symbols, GroupBy::Lineno, 0);
            assert_eq!(sites.len(), count, "{}", file.name);
            let expected: Vec<_> = top
                .iter()
                .map(|&(bytes, count, at)| (bytes, count, vec![at.shown(&symbolized)]))
                .collect();
            assert_eq!(shown(&sites[..10]), expected, "{}", file.name);
        }
        for (table, top) in [
            (&result.live_at_peak, &old.tracebacks_at_peak),
            (&result.live_at_end, &old.tracebacks_at_end),
        ] {
            let sites = group_sites(table, &symbols, GroupBy::Traceback, 0);
            let expected: Vec<_> = top
                .iter()
                .map(|&(bytes, count, frames)| {
                    let frames = frames.iter().map(|at| at.shown(&symbolized)).collect();
                    (bytes, count, frames)
                })
                .collect();
            assert_eq!(shown(&sites[..4]), expected, "{}", file.name);
        }
    }
}

/// The blocks `program.py` makes, found among the records with the stacks they were
/// recorded with (launcher frames and all; native frames as module+offset).
#[test]
fn the_programs_blocks_have_their_sizes_and_whole_stacks() {
    for file in &OLD_FILES {
        let opened = open(file);
        let records = &opened.records;
        let tables = Tables::of(records);
        let name = file.name;

        // kept = bytearray(1_000_000): one more byte for the terminating NUL; never freed.
        let (kept, addr, stack) = only_alloc(records, |d, size| d == 0 && size == 1_000_001);
        let expected = program(&[(32, "load"), (41, "main"), (45, "<module>")]);
        assert_eq!(
            tables.stack(stack),
            with_launcher(file, &expected),
            "{name}"
        );
        assert_eq!(next_at(records, kept, addr), None, "{name}");

        // temporary = bytearray(300_000), freed when scratch() returns: after the sleep, so
        // in a later block; before the marker.
        let (temporary, addr, stack) = only_alloc(records, |d, size| d == 0 && size == 300_001);
        let expected = program(&[
            (26, "scratch"),
            (34, "load"),
            (41, "main"),
            (45, "<module>"),
        ]);
        assert_eq!(
            tables.stack(stack),
            with_launcher(file, &expected),
            "{name}"
        );
        let freed = next_at(records, temporary, addr).unwrap();
        assert_eq!(records[freed], Owned::Free { domain: None, addr }, "{name}");
        assert!(
            opened.block_of[freed] > opened.block_of[temporary],
            "{name}"
        );
        let marker = records
            .iter()
            .position(|r| *r == Owned::Marker("scratch freed".to_owned()))
            .unwrap();
        assert!(freed < marker, "{name}");

        // rows: bytes(3_000 + i) for i in 0..40, each 33 bytes of header more, in order,
        // none freed.
        let expected = program(&[
            (21, "build_rows"),
            (37, "load"),
            (41, "main"),
            (45, "<module>"),
        ]);
        let rows: Vec<(usize, u64, u64)> = records
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match *r {
                Owned::Alloc {
                    domain: 0,
                    addr,
                    size,
                    stack,
                } if size > 1000 && tables.stack(stack) == with_launcher(file, &expected) => {
                    Some((i, addr, size))
                }
                _ => None,
            })
            .collect();
        let sizes: Vec<u64> = rows.iter().map(|r| r.2).collect();
        assert_eq!(sizes, (3033..3073).collect::<Vec<u64>>(), "{name}");
        let freed: Vec<_> = rows
            .iter()
            .filter_map(|&(i, addr, _)| next_at(records, i, addr))
            .collect();
        assert_eq!(freed, [], "{name}");

        // mmap.mmap(-1, 1 << 16, flags=MAP_PRIVATE): 64 KiB of native memory, never unmapped;
        // with native stacks, mmap's module and libpython's own frames above main's.
        let (mapped, addr, stack) =
            only_alloc(records, |d, size| d == NATIVE_DOMAIN && size == 65_536);
        let mut expected: Vec<String> = file
            .mmap_native_frames
            .iter()
            .map(|at| at.recorded())
            .collect();
        expected.extend(program(&[(42, "main"), (45, "<module>")]));
        assert_eq!(
            tables.stack(stack),
            with_launcher(file, &expected),
            "{name}"
        );
        assert_eq!(next_at(records, mapped, addr), None, "{name}");
    }
}

#[test]
fn native_stacks_name_their_modules() {
    for file in &OLD_FILES {
        let tables = Tables::of(&open(file).records);
        let modules: Vec<(u32, &str)> =
            tables.modules.iter().map(|m| (m.0, m.1.as_str())).collect();
        let expected: Vec<(u32, &str)> = (1..).zip(file.modules.iter().copied()).collect();
        assert_eq!(modules, expected, "{}", file.name);
        assert_eq!(
            tables.native_frames.len(),
            file.native_frames,
            "{}",
            file.name
        );
        if let Some(mmap) = tables.modules.iter().find(|m| m.1 == MMAP_SO) {
            let build_id: String = mmap.2.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(build_id, MMAP_SO_BUILD_ID, "{}", file.name);
        }
        // Every native frame names a recorded module.
        assert!(
            tables
                .native_frames
                .values()
                .all(|(module, _)| tables.modules.iter().any(|m| m.0 == *module)),
            "{}",
            file.name
        );
    }
}
