//! The reports' memory budget on a large synthetic capture: stats, sites, the flame graph
//! and the HTML report of 20 M events within [`BUDGET_KIB`] of peak RSS (VmHWM, the whole
//! process's, so nextest's process per test is what makes it each test's own). Times are
//! printed, not asserted: `benchmarks/` measures them against the peers. Run by
//! `MEMTAPE_SLOW_TESTS=1 bash scripts/test.sh`, or alone:
//! `cargo nextest run --release -p memtape-core --features slow-tests -E 'test(twenty_million)' --no-capture`
//! (`..._random_frees` is the cache-hostile worst case, `..._from_a_file` the whole
//! pipeline: write, decode, replay, stats, flame graph).

use std::time::{Duration, Instant};

use super::*;

const EVENTS: u64 = 20_000_000;
const STACKS: u32 = 2_000;
const PEAK_LIVE: u64 = 1_000_000;

/// The reports' target on about 20 M events (benchmarks/RESULTS.md, section 2): 150 MB or
/// less of peak RSS, here in KiB.
const BUDGET_KIB: u64 = 150_000_000 / 1024;

/// Asserts the process's peak RSS so far is within [`BUDGET_KIB`].
fn assert_within_budget(hwm_kib: Option<u64>) {
    let hwm = hwm_kib.expect("VmHWM from /proc/self/status");
    assert!(
        hwm <= BUDGET_KIB,
        "peak RSS {hwm} KiB, over the reports' budget of {BUDGET_KIB} KiB"
    );
}

/// xorshift64*: deterministic and cheap.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// Feeds a capture-like stream to `sink`: symbols for 2,000 stacks 8 to 24 frames deep
/// (half of them defined only after the allocations), then alloc/free churn whose live
/// count climbs to about a million blocks, falls, and climbs again; pymalloc-like small
/// blocks packed in arenas (LIFO reuse), every 64th block a big one elsewhere. A free
/// takes the youngest live block `young_percent`% of the time (temporaries), else a
/// random live block (the worst case for caches).
pub(super) fn synthetic_capture(young_percent: u64, mut sink: impl FnMut(&Record<'_>)) {
    let names: Vec<String> = (0..200)
        .map(|i| format!("module_{i}/file_{i}.py"))
        .collect();
    let functions: Vec<String> = (0..300).map(|i| format!("function_{i}")).collect();
    for (i, n) in names.iter().chain(&functions).enumerate() {
        sink(&Record::String {
            id: i as u32 + 1,
            value: n,
        });
    }
    let frames = 5_000u32;
    for f in 1..=frames {
        sink(&Record::Frame {
            id: f,
            filename: 1 + f % 200,
            name: 201 + f % 300,
            line: f % 997,
        });
    }
    // Stacks: chains of 8..24 frames, ids dense from 1 like the recorder's trie nodes;
    // the leaf is the allocating stack.
    let mut stack_records = Vec::new();
    let mut leaves = Vec::new();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for _ in 0..STACKS {
        let depth = 8 + (rng.next() % 17) as u32;
        let mut parent = 0;
        for _ in 0..depth {
            let id = stack_records.len() as u32 + 1;
            stack_records.push((id, parent, 1 + (rng.next() % u64::from(frames)) as u32));
            parent = id;
        }
        leaves.push(parent);
    }
    let (early, late) = stack_records.split_at(stack_records.len() / 2);
    for &(id, parent, frame) in early {
        sink(&Record::Stack { id, parent, frame });
    }

    let small_base = 0x7f00_0000_0000u64;
    let big_base = 0x7e00_0000_0000u64;
    let mut free_slots: Vec<u32> = Vec::new();
    let mut next_slot = 0u32;
    let mut live: Vec<u32> = Vec::with_capacity(PEAK_LIVE as usize + 1000);
    let mut events = 0u64;
    let mut time = 0u64;
    while events < EVENTS {
        if events % 1024 == 0 {
            time += 50_000;
            sink(&Record::Time { ns: time });
        }
        // Target live count: up to 1 M by 40% of the events, down to 200 k, up to 900 k.
        let phase = events * 100 / EVENTS;
        let grow = match phase {
            0..=39 => 70,
            40..=69 => 30,
            _ => 62,
        };
        let alloc =
            live.is_empty() || ((rng.next() % 100) < grow && live.len() < PEAK_LIVE as usize);
        if alloc {
            let slot = free_slots.pop().unwrap_or_else(|| {
                next_slot += 1;
                next_slot - 1
            });
            let r = rng.next();
            let big = slot % 64 == 63;
            let (addr, size) = if big {
                (big_base + u64::from(slot) * 0x10_0000, 4096 + r % 60_000)
            } else {
                (small_base + u64::from(slot) * 32, 16 + r % 16 * 2)
            };
            // A Zipf-ish stack choice: a few stacks allocate most.
            let stack =
                leaves[((r >> 20) % u64::from(STACKS)).min((r >> 40) % u64::from(STACKS)) as usize];
            sink(&Record::Alloc {
                domain: 0,
                addr,
                size,
                stack,
            });
            live.push(slot);
        } else {
            let r = rng.next();
            let slot = if r % 100 < young_percent {
                live.pop().unwrap_or_default()
            } else {
                live.swap_remove(((r >> 8) % live.len() as u64) as usize)
            };
            let addr = if slot % 64 == 63 {
                big_base + u64::from(slot) * 0x10_0000
            } else {
                small_base + u64::from(slot) * 32
            };
            sink(&Record::Free { domain: None, addr });
            free_slots.push(slot);
        }
        events += 1;
        // A time stamp every 4,096 events, 50 ns apart: a 1 s recording.
        if events % 4096 == 0 {
            sink(&Record::Time { ns: events * 50 });
        }
    }
    for &(id, parent, frame) in late {
        sink(&Record::Stack { id, parent, frame });
    }
}

fn vm_hwm_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// CPU time of this thread (the machine may be busy with other work).
fn thread_cpu() -> Duration {
    let ns = std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    Duration::from_nanos(ns)
}

fn measure(young_percent: u64) {
    let (wall, cpu) = (Instant::now(), thread_cpu());
    let mut n = 0u64;
    synthetic_capture(young_percent, |r| {
        n += u64::from(matches!(r, Record::Alloc { .. } | Record::Free { .. }))
    });
    let generate = (wall.elapsed(), thread_cpu() - cpu);
    let hwm_generator = vm_hwm_kib();

    let (wall, cpu) = (Instant::now(), thread_cpu());
    let mut analysis = Analysis::new(ReplayOptions::default());
    synthetic_capture(young_percent, |r| analysis.feed(r));
    let Analyzed { symbols, result } = analysis.finish();
    let replay = (wall.elapsed(), thread_cpu() - cpu);

    let (wall, cpu) = (Instant::now(), thread_cpu());
    let sites = group_sites(&result.live_at_peak, &symbols, GroupBy::Lineno, 0);
    let tracebacks = group_sites(&result.live_at_peak, &symbols, GroupBy::Traceback, 0);
    let folded_text = folded(&result.live_at_peak, &symbols);
    let page = flamegraph_html(&result.live_at_peak, &symbols, "peak", "");
    let html = html_report(
        &RunInfo::default(),
        &result,
        &symbols,
        &HtmlReportOptions::default(),
    );
    let reports = (wall.elapsed(), thread_cpu() - cpu);
    let hwm = vm_hwm_kib();

    println!(
        "{young_percent}% young frees, {n} events: generator alone {:?} wall / {:?} cpu; \
         generator + replay {:?} / {:?} (replay ~{:?} cpu); \
         sites + tracebacks + folded + flamegraph + report {:?} / {:?}",
        generate.0,
        generate.1,
        replay.0,
        replay.1,
        replay.1.saturating_sub(generate.1),
        reports.0,
        reports.1,
    );
    println!(
        "  peak {} in {} blocks at event {}; {} stacks live at peak; {} lineno sites, {} \
         tracebacks; folded {} B; flamegraph {} B; report {} B; {} series points",
        human_size(result.peak.bytes),
        result.peak.blocks,
        result.peak.event_index,
        result.live_at_peak.len(),
        sites.len(),
        tracebacks.len(),
        folded_text.len(),
        page.len(),
        html.len(),
        result.series.len()
    );
    println!("  VmHWM: generator alone {hwm_generator:?} KiB, at the end {hwm:?} KiB");
    assert_within_budget(hwm);
    assert_eq!(n, EVENTS);
    assert_eq!(result.events, EVENTS);
    assert!(result.peak.blocks >= PEAK_LIVE - 1);
    assert_eq!(total_bytes(&result.live_at_peak), result.peak.bytes);
    assert_eq!(total_bytes(&result.live_at_end), result.end_bytes);
    assert!(result.series.len() <= DEFAULT_MAX_POINTS);
    assert_eq!(
        result.series.iter().map(|p| p.bytes).max(),
        Some(result.peak.bytes)
    );
}

#[test]
fn twenty_million_events() {
    // Half the frees are temporaries, half random old blocks.
    measure(50);
}

#[test]
fn twenty_million_events_random_frees() {
    // Every free hits a random live block: one cache miss each.
    measure(0);
}

#[test]
fn twenty_million_events_from_a_file() {
    use crate::capture::{BlockEncoder, CaptureFileWriter, CaptureReader};
    use std::io::BufWriter;

    let path =
        std::env::temp_dir().join(format!("memtape-report-perf-{}.mtape", std::process::id()));
    let wall = Instant::now();
    {
        let file = std::fs::File::create(&path).unwrap();
        let mut w = CaptureFileWriter::new(BufWriter::new(file), r#"{"tool":"memtape"}"#).unwrap();
        let mut enc = BlockEncoder::with_capacity(300 << 10);
        synthetic_capture(50, |r| {
            enc.record(r);
            if enc.len() >= 256 << 10 {
                w.write_block(&enc.take()).unwrap();
            }
        });
        w.write_block(&enc.take()).unwrap();
        w.finish(r#"{"exit":"normal"}"#).unwrap();
    }
    let size = std::fs::metadata(&path).unwrap().len();
    println!(
        "wrote {} ({:.2} B/event) in {:?}",
        human_size(size),
        size as f64 / EVENTS as f64,
        wall.elapsed()
    );
    let hwm_writer = vm_hwm_kib();

    let (wall, cpu) = (Instant::now(), thread_cpu());
    let mut n = 0u64;
    let file = std::fs::File::open(&path).unwrap();
    let mut reader = CaptureReader::new(file).unwrap();
    reader
        .for_each_record(|r| n += u64::from(r.is_event()))
        .unwrap();
    let decode = (wall.elapsed(), thread_cpu() - cpu);

    let (wall, cpu) = (Instant::now(), thread_cpu());
    let file = std::fs::File::open(&path).unwrap();
    let mut reader = CaptureReader::new(file).unwrap();
    let mut analysis = Analysis::new(ReplayOptions::default());
    reader.for_each_record(|r| analysis.feed(&r)).unwrap();
    let Analyzed { symbols, result } = analysis.finish();
    let stats = stats_text(&RunInfo::default(), &result);
    let stats_time = (wall.elapsed(), thread_cpu() - cpu);
    let page = flamegraph_html(&result.live_at_peak, &symbols, "peak", "");
    let flamegraph_time = (wall.elapsed(), thread_cpu() - cpu);
    let hwm = vm_hwm_kib();
    std::fs::remove_file(&path).unwrap();

    println!(
        "decode alone {:?} wall / {:?} cpu; decode + replay + stats {:?} / {:?}; \
         + flame graph page {:?} / {:?}",
        decode.0, decode.1, stats_time.0, stats_time.1, flamegraph_time.0, flamegraph_time.1
    );
    println!(
        "  VmHWM after writing {hwm_writer:?} KiB, at the end {hwm:?} KiB; stats {} B, page {} B",
        stats.len(),
        page.len()
    );
    assert_within_budget(hwm);
    assert_eq!(n, EVENTS);
    assert_eq!(result.events, EVENTS);
    // Through the file or straight from the generator, the same answers.
    let mut direct = Analysis::new(ReplayOptions::default());
    synthetic_capture(50, |r| direct.feed(r));
    let direct = direct.finish().result;
    assert_eq!(result.peak.bytes, direct.peak.bytes);
    assert_eq!(result.peak.blocks, direct.peak.blocks);
    assert_eq!(result.peak.event_index, direct.peak.event_index);
    assert_eq!(result.end_bytes, direct.end_bytes);
    assert_eq!(result.live_at_peak.len(), direct.live_at_peak.len());
}
