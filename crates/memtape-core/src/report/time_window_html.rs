//! The time-window view of the HTML report: the controls under the chart and the data
//! its script reads (`assets/timewindow.js`).
//!
//! Clicking the chart shows what was live at the end of the time bucket clicked; dragging
//! across it shows what the buckets covered allocated and had not freed by the window's
//! end. The page carries the [`TimeHistogram`] cut to [`MAX_WINDOW_ROWS`] rows
//! ([`TimeHistogram::bounded`]): the kept stacks as a trie of shared frames, each with its
//! rows, plus the other stacks lumped per bucket pair, so its size does not grow with the
//! recording and every total stays exact.
//!
//! Data (`#window-data`, JSON): `bucket_ns`, `buckets`, `strings`, `frames` as
//! `[function, file, line]` string indexes, `nodes` as `[parent node (-1: none), frame]`,
//! and `stacks` as `[node (-1: the other stacks), bytes at the peak, blocks at the peak,
//! then alloc bucket, free bucket, bytes, blocks for each row]`.

use std::fmt::Write as _;

use rustc_hash::FxHashMap;

use super::flamegraph::{write_frame_tables, NO_PYTHON_FRAME};
use super::import_frames::import_mode_note;
use super::json::{push_json_string, JsonWriter};
use super::live_by_stack::StackTotal;
use super::replay::ReplayResult;
use super::symbols::{FrameKey, Symbols};
use super::time_histogram::{HistRow, TimeHistogram};
use super::timeline_csv::timeline_csv;

/// The script of the time-window view, inlined after the flame graph's.
pub(crate) const TIME_WINDOW_JS: &str = include_str!("assets/timewindow.js");

/// Rows of the histogram a page carries, kept stacks and lumped ones together: about
/// 25 bytes each in the page.
pub const MAX_WINDOW_ROWS: usize = 100_000;

/// The label of the lumped stacks.
const OTHER_STACKS: &str = "[other stacks]";

/// Interned strings, frames and a trie of stacks, outermost frame at the root.
#[derive(Default)]
struct Tables<'s> {
    strings: Vec<&'s str>,
    string_index: FxHashMap<&'s str, u64>,
    frames: Vec<(u64, u64, u32)>,
    frame_index: FxHashMap<Option<FrameKey>, u64>,
    nodes: Vec<(i64, u64)>,
    node_index: FxHashMap<(i64, u64), i64>,
}

impl<'s> Tables<'s> {
    fn string(&mut self, s: &'s str) -> u64 {
        if let Some(&i) = self.string_index.get(s) {
            return i;
        }
        self.strings.push(s);
        let i = self.strings.len() as u64 - 1;
        self.string_index.insert(s, i);
        i
    }

    /// A frame; `None` is the frame of blocks with no Python frame.
    fn frame(&mut self, symbols: &'s Symbols, key: Option<FrameKey>) -> u64 {
        if let Some(&i) = self.frame_index.get(&key) {
            return i;
        }
        let entry = match key {
            Some(k) => {
                let f = symbols.resolve(k);
                (self.string(f.function), self.string(f.filename), f.line)
            }
            None => (self.string(NO_PYTHON_FRAME), self.string(""), 0),
        };
        self.frames.push(entry);
        let i = self.frames.len() as u64 - 1;
        self.frame_index.insert(key, i);
        i
    }

    /// The trie node of `stack`'s frames.
    fn stack(&mut self, symbols: &'s Symbols, stack: u32, keys: &mut Vec<FrameKey>) -> i64 {
        keys.clear();
        symbols.frame_keys_into(stack, keys);
        let path: Vec<Option<FrameKey>> = if keys.is_empty() {
            vec![None]
        } else {
            keys.iter().rev().map(|&k| Some(k)).collect()
        };
        let mut at = -1i64;
        for key in path {
            let frame = self.frame(symbols, key);
            let next = self.nodes.len() as i64;
            let child = *self.node_index.entry((at, frame)).or_insert(next);
            if child == next {
                self.nodes.push((at, frame));
            }
            at = child;
        }
        at
    }
}

fn write_rows(w: &mut JsonWriter, node: i64, peak: (u64, u64), rows: &[HistRow]) {
    w.begin_array().int(node).uint(peak.0).uint(peak.1);
    for r in rows {
        w.uint(u64::from(r.alloc))
            .uint(u64::from(r.freed))
            .uint(r.bytes)
            .uint(r.count);
    }
    w.end_array();
}

/// The JSON of `#window-data`.
pub(crate) fn window_data(r: &ReplayResult, symbols: &Symbols, max_rows: usize) -> String {
    let hist: &TimeHistogram = &r.time_histogram;
    let bounded = hist.bounded(&r.live_at_peak, max_rows);
    let peak: FxHashMap<u32, &StackTotal> = r.live_at_peak.iter().map(|t| (t.stack, t)).collect();
    let mut tables = Tables::default();
    let mut keys = Vec::new();
    let mut groups: Vec<(i64, (u64, u64), &[HistRow])> = Vec::new();
    let (mut kept_bytes, mut kept_count) = (0u64, 0u64);
    let rows = &bounded.kept.rows;
    let mut start = 0;
    while start < rows.len() {
        let stack = rows[start].stack;
        let end = start + rows[start..].partition_point(|x| x.stack == stack);
        let at_peak = peak.get(&stack).map_or((0, 0), |t| (t.bytes, t.count));
        kept_bytes += at_peak.0;
        kept_count += at_peak.1;
        groups.push((
            tables.stack(symbols, stack, &mut keys),
            at_peak,
            &rows[start..end],
        ));
        start = end;
    }
    let other_frame = tables.frames.len();
    let other_label = tables.string(OTHER_STACKS);
    let empty = tables.string("");
    tables.frames.push((other_label, empty, 0));
    let peak_blocks: u64 = r.live_at_peak.iter().map(|t| t.count).sum();

    let mut w = JsonWriter::new();
    w.begin_object()
        .key("bucket_ns")
        .uint(hist.bucket_ns)
        .key("buckets")
        .uint(u64::from(hist.buckets))
        .key("duration_ns")
        .uint(r.duration_ns)
        .key("other_frame")
        .uint(other_frame as u64);
    write_frame_tables(&mut w, &tables.strings, &tables.frames);
    w.key("nodes").begin_array();
    for &(parent, frame) in &tables.nodes {
        w.begin_array().int(parent).uint(frame).end_array();
    }
    w.end_array().key("stacks").begin_array();
    for (node, at_peak, rows) in &groups {
        write_rows(&mut w, *node, *at_peak, rows);
    }
    let other_peak = (
        r.peak.bytes.saturating_sub(kept_bytes),
        peak_blocks.saturating_sub(kept_count),
    );
    write_rows(&mut w, -1, other_peak, &bounded.other.rows);
    w.end_array().end_object();
    w.finish()
}

/// The controls under the chart, the view's data and the timeline's CSV.
pub(crate) fn time_window_controls(out: &mut String, r: &ReplayResult, symbols: &Symbols) {
    out.push_str(concat!(
        "<div id=\"window-bar\">",
        "<span id=\"window-status\" data-view=\"peak\">Showing memory live at the peak. ",
        "Click the chart to see a moment; drag across it to see what a stretch of time ",
        "allocated and had not freed by its end.</span> ",
        "<button type=\"button\" id=\"window-reset\" hidden>Back to the peak</button> ",
        "<button type=\"button\" id=\"timeline-csv\">Download the timeline as CSV</button>",
        "</div>\n"
    ));
    import_mode_note(out, symbols.import_frames());
    out.push_str("<script type=\"application/json\" id=\"window-data\">");
    out.push_str(&window_data(r, symbols, MAX_WINDOW_ROWS));
    out.push_str("</script>\n<script type=\"application/json\" id=\"timeline-csv-data\">");
    push_json_string(out, &timeline_csv(r));
    let _ = writeln!(out, "</script>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::live_by_stack::total_bytes;
    use crate::report::record::Record;

    /// `n` stacks in a binary tree of depth about log2(n), over 1,000 distinct frames.
    fn symbols(n: u32) -> Symbols {
        let mut s = Symbols::new();
        let names: Vec<String> = (0..1000).map(|i| format!("f{i}")).collect();
        s.feed(&Record::String {
            id: 1,
            value: "app.py",
        });
        for (i, name) in names.iter().enumerate() {
            let i = i as u32;
            s.feed(&Record::String {
                id: i + 2,
                value: name,
            });
            s.feed(&Record::Frame {
                id: i + 1,
                filename: 1,
                name: i + 2,
                line: i,
            });
        }
        for id in 1..=n {
            s.feed(&Record::Stack {
                id,
                parent: id / 2,
                frame: id % 1000 + 1,
            });
        }
        s
    }

    /// Many stacks, each with many bucket pairs: far more rows than a page may carry.
    #[test]
    fn page_data_stays_bounded_and_exact() {
        let stacks = 6_000u32;
        let buckets = 256u16;
        let mut rows = Vec::new();
        let mut x = 12345u64;
        for stack in 1..=stacks {
            for _ in 0..30 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let a = ((x >> 33) % u64::from(buckets)) as u16;
                let f = a + 1 + ((x >> 20) % u64::from(buckets - a)) as u16;
                rows.push(HistRow {
                    stack,
                    alloc: a,
                    freed: f,
                    bytes: (x >> 40) % 100_000 + 1,
                    count: 1,
                });
            }
        }
        rows.sort_unstable_by_key(|r| (r.stack, r.alloc, r.freed));
        rows.dedup_by_key(|r| (r.stack, r.alloc, r.freed));
        let full = TimeHistogram {
            bucket_ns: 1 << 20,
            buckets,
            rows,
        };
        let r = ReplayResult {
            live_at_peak: full.live_at(100),
            time_histogram: full.clone(),
            ..ReplayResult::default()
        };
        let json = window_data(&r, &symbols(stacks), MAX_WINDOW_ROWS);
        assert!(json.len() < 4 << 20, "{} bytes", json.len());
        let bounded = full.bounded(&r.live_at_peak, MAX_WINDOW_ROWS);
        assert!(bounded.kept.rows.len() + bounded.other.rows.len() <= MAX_WINDOW_ROWS);
        assert!(!bounded.kept.rows.is_empty());
        for t in [0, 100, 255] {
            assert_eq!(
                total_bytes(&bounded.kept.live_at(t)) + total_bytes(&bounded.other.live_at(t)),
                total_bytes(&full.live_at(t))
            );
        }
        eprintln!(
            "{} rows ({} stacks) -> {} kept + {} lumped rows, {} bytes of page data",
            full.rows.len(),
            stacks,
            bounded.kept.rows.len(),
            bounded.other.rows.len(),
            json.len()
        );
    }
}
