//! Sites: a per-stack table grouped by line, by file or by traceback, sorted the way
//! tracemalloc's `Snapshot.statistics` sorts (biggest first by bytes, then count, then
//! the frames compared oldest first).

use std::cmp::Ordering;

use rustc_hash::FxHashMap;

use crate::trace_set::GroupBy;

use super::live_by_stack::StackTotal;
use super::symbols::{FrameKey, Symbols};

/// A resolved frame.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// File name.
    pub filename: String,
    /// Function name (empty in a per-file group).
    pub function: String,
    /// Line number (0 in a per-file group).
    pub line: u32,
}

/// A group of live blocks and what they add up to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    /// The group's frames, innermost first: one for `Lineno` and `Filename` (none for
    /// blocks allocated with no Python frame), the stack for `Traceback`.
    pub frames: Vec<Frame>,
    /// Bytes.
    pub bytes: u64,
    /// Blocks.
    pub count: u64,
}

/// A site with the tracebacks that make it up, biggest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteDetail {
    /// The site.
    pub site: Site,
    /// Its biggest tracebacks (whole stacks).
    pub tracebacks: Vec<Site>,
}

/// Compares frame lists oldest frame first, by (file, line, function).
pub fn compare_frames(a: &[Frame], b: &[Frame]) -> Ordering {
    fn key(f: &Frame) -> (&str, u32, &str) {
        (&f.filename, f.line, &f.function)
    }
    a.iter().rev().map(key).cmp(b.iter().rev().map(key))
}

/// tracemalloc's order: biggest first by (bytes, count, frames).
pub fn sort_sites(sites: &mut [Site]) {
    sites.sort_unstable_by(|a, b| {
        b.bytes
            .cmp(&a.bytes)
            .then(b.count.cmp(&a.count))
            .then_with(|| compare_frames(&b.frames, &a.frames))
    });
}

fn group_key(frames: &[FrameKey], by: GroupBy, max_frames: usize) -> Vec<FrameKey> {
    match by {
        GroupBy::Traceback if max_frames > 0 => frames[..frames.len().min(max_frames)].to_vec(),
        GroupBy::Traceback => frames.to_vec(),
        GroupBy::Lineno => frames.first().copied().into_iter().collect(),
        GroupBy::Filename => frames.first().map(|f| f.file_only()).into_iter().collect(),
    }
}

fn resolve(symbols: &Symbols, key: &[FrameKey]) -> Vec<Frame> {
    key.iter()
        .map(|&k| {
            let f = symbols.resolve(k);
            Frame {
                filename: f.filename.to_owned(),
                function: f.function.to_owned(),
                line: f.line,
            }
        })
        .collect()
}

#[derive(Default)]
struct Group {
    bytes: u64,
    count: u64,
    tracebacks: FxHashMap<Vec<FrameKey>, (u64, u64)>,
}

fn sorted(symbols: &Symbols, groups: FxHashMap<Vec<FrameKey>, (u64, u64)>) -> Vec<Site> {
    let mut sites: Vec<Site> = groups
        .into_iter()
        .map(|(key, (bytes, count))| Site {
            frames: resolve(symbols, &key),
            bytes,
            count,
        })
        .collect();
    sort_sites(&mut sites);
    sites
}

/// Groups a per-stack table. `max_frames` truncates tracebacks to their innermost
/// frames (0: keep all); it only matters for [`GroupBy::Traceback`].
pub fn group_sites(
    table: &[StackTotal],
    symbols: &Symbols,
    by: GroupBy,
    max_frames: usize,
) -> Vec<Site> {
    let mut groups: FxHashMap<Vec<FrameKey>, (u64, u64)> = FxHashMap::default();
    let mut frames = Vec::new();
    for t in table {
        frames.clear();
        symbols.frame_keys_into(t.stack, &mut frames);
        let g = groups
            .entry(group_key(&frames, by, max_frames))
            .or_default();
        g.0 += t.bytes;
        g.1 += t.count;
    }
    sorted(symbols, groups)
}

/// Groups a per-stack table and keeps, for each site, its `max_tracebacks` biggest
/// whole tracebacks.
pub fn group_sites_with_tracebacks(
    table: &[StackTotal],
    symbols: &Symbols,
    by: GroupBy,
    max_tracebacks: usize,
) -> Vec<SiteDetail> {
    let mut groups: FxHashMap<Vec<FrameKey>, Group> = FxHashMap::default();
    let mut frames = Vec::new();
    for t in table {
        frames.clear();
        symbols.frame_keys_into(t.stack, &mut frames);
        let g = groups.entry(group_key(&frames, by, 0)).or_default();
        g.bytes += t.bytes;
        g.count += t.count;
        let tb = g.tracebacks.entry(frames.clone()).or_default();
        tb.0 += t.bytes;
        tb.1 += t.count;
    }
    let mut details: Vec<SiteDetail> = groups
        .into_iter()
        .map(|(key, g)| {
            let mut tracebacks = sorted(symbols, g.tracebacks);
            tracebacks.truncate(max_tracebacks);
            SiteDetail {
                site: Site {
                    frames: resolve(symbols, &key),
                    bytes: g.bytes,
                    count: g.count,
                },
                tracebacks,
            }
        })
        .collect();
    details.sort_unstable_by(|a, b| {
        b.site
            .bytes
            .cmp(&a.site.bytes)
            .then(b.site.count.cmp(&a.site.count))
            .then_with(|| compare_frames(&b.site.frames, &a.site.frames))
    });
    details
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::live_by_stack::st;
    use crate::report::record::Record;

    /// Files a.py and b.py; stacks: 1 = a.py:1 f; 2 = 1 + a.py:2 g; 3 = 1 + b.py:5 h;
    /// 4 = 2 + b.py:5 h (so 3 and 4 share their innermost line).
    fn symbols() -> Symbols {
        let mut s = Symbols::new();
        let records = [
            Record::String {
                id: 1,
                value: "a.py",
            },
            Record::String {
                id: 2,
                value: "b.py",
            },
            Record::String { id: 3, value: "f" },
            Record::String { id: 4, value: "g" },
            Record::String { id: 5, value: "h" },
            Record::Frame {
                id: 1,
                filename: 1,
                name: 3,
                line: 1,
            },
            Record::Frame {
                id: 2,
                filename: 1,
                name: 4,
                line: 2,
            },
            Record::Frame {
                id: 3,
                filename: 2,
                name: 5,
                line: 5,
            },
            Record::Stack {
                id: 1,
                parent: 0,
                frame: 1,
            },
            Record::Stack {
                id: 2,
                parent: 1,
                frame: 2,
            },
            Record::Stack {
                id: 3,
                parent: 1,
                frame: 3,
            },
            Record::Stack {
                id: 4,
                parent: 2,
                frame: 3,
            },
        ];
        for r in &records {
            s.feed(r);
        }
        s
    }

    /// `(frames as (file, line), bytes, count)`.
    type Brief = (Vec<(String, u32)>, u64, u64);

    fn brief(sites: &[Site]) -> Vec<Brief> {
        sites
            .iter()
            .map(|s| {
                let frames = s
                    .frames
                    .iter()
                    .map(|f| (f.filename.clone(), f.line))
                    .collect();
                (frames, s.bytes, s.count)
            })
            .collect()
    }

    fn fl(f: &str, l: u32) -> (String, u32) {
        (f.to_owned(), l)
    }

    #[test]
    fn group_by_line_file_and_traceback() {
        let s = symbols();
        let table = [
            st(1, 10, 1),
            st(2, 30, 3),
            st(3, 25, 1),
            st(4, 5, 1),
            st(0, 7, 2),
        ];
        assert_eq!(
            brief(&group_sites(&table, &s, GroupBy::Lineno, 0)),
            vec![
                (vec![fl("a.py", 2)], 30, 3),
                (vec![fl("b.py", 5)], 30, 2),
                (vec![fl("a.py", 1)], 10, 1),
                (vec![], 7, 2),
            ]
        );
        assert_eq!(
            brief(&group_sites(&table, &s, GroupBy::Filename, 0)),
            vec![
                (vec![fl("a.py", 0)], 40, 4),
                (vec![fl("b.py", 0)], 30, 2),
                (vec![], 7, 2),
            ]
        );
        let tb = group_sites(&table, &s, GroupBy::Traceback, 0);
        assert_eq!(
            brief(&tb),
            vec![
                (vec![fl("a.py", 2), fl("a.py", 1)], 30, 3),
                (vec![fl("b.py", 5), fl("a.py", 1)], 25, 1),
                (vec![fl("a.py", 1)], 10, 1),
                (vec![], 7, 2),
                (vec![fl("b.py", 5), fl("a.py", 2), fl("a.py", 1)], 5, 1),
            ]
        );
        assert_eq!(tb[0].frames[0].function, "g");
        // Truncated to the innermost frame, tracebacks are lines again.
        assert_eq!(
            brief(&group_sites(&table, &s, GroupBy::Traceback, 1)),
            brief(&group_sites(&table, &s, GroupBy::Lineno, 0))
        );
    }

    #[test]
    fn ties_sort_by_frames_oldest_first_descending() {
        let s = symbols();
        // Same bytes and count: the key decides, biggest first. Oldest frames: stack 3's
        // is a.py:1 and stack 1's too; then b.py:5 (stack 3) > nothing (stack 1).
        let table = [st(1, 8, 1), st(3, 8, 1), st(2, 8, 1)];
        assert_eq!(
            brief(&group_sites(&table, &s, GroupBy::Traceback, 0)),
            vec![
                (vec![fl("b.py", 5), fl("a.py", 1)], 8, 1),
                (vec![fl("a.py", 2), fl("a.py", 1)], 8, 1),
                (vec![fl("a.py", 1)], 8, 1),
            ]
        );
    }

    #[test]
    fn sites_keep_their_biggest_tracebacks() {
        let s = symbols();
        let table = [st(3, 25, 1), st(4, 5, 1), st(1, 1, 1)];
        let d = group_sites_with_tracebacks(&table, &s, GroupBy::Lineno, 1);
        assert_eq!(
            brief(&[d[0].site.clone()]),
            vec![(vec![fl("b.py", 5)], 30, 2)]
        );
        assert_eq!(
            brief(&d[0].tracebacks),
            vec![(vec![fl("b.py", 5), fl("a.py", 1)], 25, 1)]
        );
        assert_eq!(d.len(), 2);
    }
}
