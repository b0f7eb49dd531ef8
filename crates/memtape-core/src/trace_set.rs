//! A snapshot of traces with resolved frames, and tracemalloc's statistics over it.
//!
//! Frames are `(filename, lineno)`; a traceback is a list of frames, most recent first
//! (the order of `_tracemalloc._get_traces()`). Filenames, frames and tracebacks are
//! interned once, so grouping a million traces touches integers only.

use std::cmp::Ordering;
use std::sync::Arc;

use rustc_hash::FxHashMap;

/// How statistics group traces (tracemalloc's `key_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupBy {
    /// The whole traceback.
    Traceback,
    /// The most recent frame.
    Lineno,
    /// The most recent frame's file (line 0).
    Filename,
}

/// Invalid statistics request, with tracemalloc's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatsError {
    /// Cumulative mode only makes sense per line or per file.
    #[error("cumulative mode cannot by used with key type 'traceback'")]
    CumulativeTraceback,
}

/// One trace: a block of `size` bytes in `domain`, allocated by traceback `traceback`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRecord {
    /// tracemalloc's domain.
    pub domain: u64,
    /// Size in bytes.
    pub size: u64,
    /// Index into the set's tracebacks.
    pub traceback: u32,
}

/// A group of traces and what they add up to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupStat {
    /// The group's frames, most recent first, as `(filename index, lineno)`.
    pub key: Vec<(u32, i64)>,
    /// Total size in bytes.
    pub size: u64,
    /// Number of traces (in cumulative mode: of frame occurrences).
    pub count: u64,
}

#[derive(Debug, Default)]
struct Tables {
    filenames: Vec<String>,
    frames: Vec<(u32, i64)>,
    tracebacks: Vec<Traceback>,
}

#[derive(Debug, Clone)]
struct Traceback {
    frames: Vec<u32>,
    total_nframe: Option<u64>,
}

/// Traces sharing one set of interned frames. Cheap to filter: selections share tables.
#[derive(Debug, Clone)]
pub struct TraceSet {
    tables: Arc<Tables>,
    traces: Vec<TraceRecord>,
}

/// Builds a [`TraceSet`], interning filenames, frames and tracebacks as they come.
#[derive(Debug, Default)]
pub struct TraceSetBuilder {
    tables: Tables,
    filename_ids: FxHashMap<String, u32>,
    frame_ids: FxHashMap<(u32, i64), u32>,
    traceback_ids: FxHashMap<(Vec<u32>, Option<u64>), u32>,
    traces: Vec<TraceRecord>,
}

impl TraceSetBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Interns a filename.
    pub fn filename(&mut self, name: &str) -> u32 {
        if let Some(id) = self.filename_ids.get(name) {
            return *id;
        }
        let id = self.tables.filenames.len() as u32;
        self.tables.filenames.push(name.to_owned());
        self.filename_ids.insert(name.to_owned(), id);
        id
    }

    /// Interns a frame.
    pub fn frame(&mut self, filename: u32, lineno: i64) -> u32 {
        let frames = &mut self.tables.frames;
        *self.frame_ids.entry((filename, lineno)).or_insert_with(|| {
            frames.push((filename, lineno));
            (frames.len() - 1) as u32
        })
    }

    /// Interns a traceback (frames most recent first).
    pub fn traceback(&mut self, frames: Vec<u32>, total_nframe: Option<u64>) -> u32 {
        let tracebacks = &mut self.tables.tracebacks;
        *self
            .traceback_ids
            .entry((frames, total_nframe))
            .or_insert_with_key(|(frames, total_nframe)| {
                tracebacks.push(Traceback {
                    frames: frames.clone(),
                    total_nframe: *total_nframe,
                });
                (tracebacks.len() - 1) as u32
            })
    }

    /// Adds a trace.
    pub fn trace(&mut self, domain: u64, size: u64, traceback: u32) {
        self.traces.push(TraceRecord {
            domain,
            size,
            traceback,
        });
    }

    /// The finished set, traces in the order they were added.
    pub fn build(self) -> TraceSet {
        TraceSet {
            tables: Arc::new(self.tables),
            traces: self.traces,
        }
    }
}

impl TraceSet {
    /// Number of traces.
    pub fn len(&self) -> usize {
        self.traces.len()
    }

    /// True when there are no traces.
    pub fn is_empty(&self) -> bool {
        self.traces.is_empty()
    }

    /// The traces, in order.
    pub fn traces(&self) -> &[TraceRecord] {
        &self.traces
    }

    /// Interned filenames.
    pub fn filenames(&self) -> &[String] {
        &self.tables.filenames
    }

    /// Number of interned tracebacks (valid indices for [`TraceSet::traceback_frames`]).
    pub fn traceback_count(&self) -> usize {
        self.tables.tracebacks.len()
    }

    /// A traceback's frames, most recent first, as `(filename index, lineno)`.
    pub fn traceback_frames(&self, traceback: u32) -> impl Iterator<Item = (u32, i64)> + '_ {
        self.tables.tracebacks[traceback as usize]
            .frames
            .iter()
            .map(|f| self.tables.frames[*f as usize])
    }

    /// A traceback's total frame count as recorded (None for old 3-tuple traces).
    pub fn traceback_total_nframe(&self, traceback: u32) -> Option<u64> {
        self.tables.tracebacks[traceback as usize].total_nframe
    }

    /// The traces for which `keep(trace)` is true, sharing this set's tables.
    pub fn select(&self, mut keep: impl FnMut(&TraceRecord) -> bool) -> TraceSet {
        TraceSet {
            tables: Arc::clone(&self.tables),
            traces: self.traces.iter().copied().filter(|t| keep(t)).collect(),
        }
    }

    /// tracemalloc's `Snapshot.statistics`: groups, sorted from the biggest down by
    /// `(size, count, traceback)` where tracebacks compare oldest frame first.
    pub fn statistics(
        &self,
        group_by: GroupBy,
        cumulative: bool,
    ) -> Result<Vec<GroupStat>, StatsError> {
        if cumulative && group_by == GroupBy::Traceback {
            return Err(StatsError::CumulativeTraceback);
        }
        let mut groups: FxHashMap<Vec<(u32, i64)>, (u64, u64)> = FxHashMap::default();
        let mut add = |key: Vec<(u32, i64)>, size: u64| {
            let g = groups.entry(key).or_insert((0, 0));
            g.0 += size;
            g.1 += 1;
        };
        if cumulative {
            for t in &self.traces {
                for (file, line) in self.traceback_frames(t.traceback) {
                    let line = if group_by == GroupBy::Filename {
                        0
                    } else {
                        line
                    };
                    add(vec![(file, line)], t.size);
                }
            }
        } else {
            // Group per distinct traceback first, then fold tracebacks into keys.
            let mut per_tb: Vec<(u64, u64)> = vec![(0, 0); self.tables.tracebacks.len()];
            for t in &self.traces {
                let g = &mut per_tb[t.traceback as usize];
                g.0 += t.size;
                g.1 += 1;
            }
            for (tb, (size, count)) in per_tb.into_iter().enumerate() {
                if count == 0 {
                    continue;
                }
                let mut frames = self.traceback_frames(tb as u32);
                let key: Vec<(u32, i64)> = match group_by {
                    GroupBy::Traceback => frames.collect(),
                    GroupBy::Lineno => frames.next().into_iter().collect(),
                    GroupBy::Filename => frames.next().map(|(f, _)| (f, 0)).into_iter().collect(),
                };
                let g = groups.entry(key).or_insert((0, 0));
                g.0 += size;
                g.1 += count;
            }
        }
        let mut stats: Vec<GroupStat> = groups
            .into_iter()
            .map(|(key, (size, count))| GroupStat { key, size, count })
            .collect();
        stats.sort_unstable_by(|a, b| self.compare_stats(b, a));
        Ok(stats)
    }

    fn compare_stats(&self, a: &GroupStat, b: &GroupStat) -> Ordering {
        a.size
            .cmp(&b.size)
            .then(a.count.cmp(&b.count))
            .then_with(|| self.compare_keys_oldest_first(&a.key, &b.key))
    }

    fn compare_keys_oldest_first(&self, a: &[(u32, i64)], b: &[(u32, i64)]) -> Ordering {
        let names = &self.tables.filenames;
        let frame = |&(f, l): &(u32, i64)| (names[f as usize].as_str(), l);
        a.iter().rev().map(frame).cmp(b.iter().rev().map(frame))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type RawTrace<'a> = (u64, u64, &'a [(&'a str, i64)]);
    type NamedStat = (Vec<(String, i64)>, u64, u64);

    fn set(traces: &[RawTrace<'_>]) -> TraceSet {
        let mut b = TraceSetBuilder::new();
        for (domain, size, frames) in traces {
            let ids = frames
                .iter()
                .map(|(f, l)| {
                    let f = b.filename(f);
                    b.frame(f, *l)
                })
                .collect();
            let tb = b.traceback(ids, Some(frames.len() as u64));
            b.trace(*domain, *size, tb);
        }
        b.build()
    }

    fn named(s: &TraceSet, stats: &[GroupStat]) -> Vec<NamedStat> {
        stats
            .iter()
            .map(|g| {
                let key = g
                    .key
                    .iter()
                    .map(|(f, l)| (s.filenames()[*f as usize].clone(), *l))
                    .collect();
                (key, g.size, g.count)
            })
            .collect()
    }

    fn sample() -> TraceSet {
        set(&[
            (0, 10, &[("a.py", 2), ("b.py", 4)]),
            (0, 10, &[("a.py", 2), ("b.py", 4)]),
            (0, 10, &[("a.py", 2), ("b.py", 4)]),
            (1, 2, &[("a.py", 5), ("b.py", 4)]),
            (2, 66, &[("b.py", 1)]),
            (3, 7, &[("<unknown>", 0)]),
        ])
    }

    #[test]
    fn groups_by_line_file_and_traceback() {
        let s = sample();
        let by_line = named(&s, &s.statistics(GroupBy::Lineno, false).unwrap());
        assert_eq!(
            by_line,
            vec![
                (vec![("b.py".into(), 1)], 66, 1),
                (vec![("a.py".into(), 2)], 30, 3),
                (vec![("<unknown>".into(), 0)], 7, 1),
                (vec![("a.py".into(), 5)], 2, 1),
            ]
        );
        let by_file = named(&s, &s.statistics(GroupBy::Filename, false).unwrap());
        assert_eq!(
            by_file,
            vec![
                (vec![("b.py".into(), 0)], 66, 1),
                (vec![("a.py".into(), 0)], 32, 4),
                (vec![("<unknown>".into(), 0)], 7, 1),
            ]
        );
        let by_tb = s.statistics(GroupBy::Traceback, false).unwrap();
        assert_eq!(by_tb.len(), 4);
        assert_eq!(by_tb[1].key.len(), 2);
    }

    #[test]
    fn cumulative_counts_every_frame() {
        let s = set(&[(0, 5, &[("a.py", 1), ("a.py", 1), ("b.py", 2)])]);
        let stats = named(&s, &s.statistics(GroupBy::Lineno, true).unwrap());
        assert_eq!(
            stats,
            vec![
                (vec![("a.py".into(), 1)], 10, 2),
                (vec![("b.py".into(), 2)], 5, 1)
            ]
        );
        let files = named(&s, &s.statistics(GroupBy::Filename, true).unwrap());
        assert_eq!(files[0], (vec![("a.py".into(), 0)], 10, 2));
        assert_eq!(
            s.statistics(GroupBy::Traceback, true),
            Err(StatsError::CumulativeTraceback)
        );
    }

    #[test]
    fn ties_break_on_traceback_oldest_frame_first() {
        let s = set(&[
            (0, 8, &[("z.py", 1), ("a.py", 9)]),
            (0, 8, &[("a.py", 1), ("b.py", 1)]),
        ]);
        let stats = named(&s, &s.statistics(GroupBy::Traceback, false).unwrap());
        // Oldest frames: b.py:1 > a.py:9, so the second trace sorts first (descending).
        assert_eq!(stats[0].0[1].0, "b.py");
    }

    #[test]
    fn select_shares_tables() {
        let s = sample();
        let only0 = s.select(|t| t.domain == 0);
        assert_eq!(only0.len(), 3);
        assert_eq!(only0.traceback_count(), s.traceback_count());
    }
}
