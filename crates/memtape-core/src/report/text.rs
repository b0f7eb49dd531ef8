//! Plain-text tables for the terminal (`memtape stats`, `top`, `diff`).

use std::fmt::Write as _;

use super::diff::SiteDiff;
use super::flamegraph::NO_PYTHON_FRAME;
use super::replay::ReplayResult;
use super::rss_account::RssAccount;
use super::run_info::RunInfo;
use super::sites::{Frame, Site};
use super::units::{grouped, human_duration, human_size, human_size_diff, percent, signed_count};
use crate::memory_source::{MemorySource, SourceSplit};

/// `s` with control characters (a terminal escape in a file name) written as escapes.
fn printable(s: &str) -> std::borrow::Cow<'_, str> {
    if s.chars().any(char::is_control) {
        s.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect::<String>()
            .into()
    } else {
        s.into()
    }
}

/// How the reports name `count` frees of blocks the replay never saw allocated.
pub(crate) fn unknown_frees(count: u64) -> String {
    let blocks = if count == 1 { "block" } else { "blocks" };
    format!(
        "{} {blocks} not seen allocated (from before the capture)",
        grouped(count)
    )
}

/// `file:line in function` (`file` alone for a per-file group, `function` alone for a
/// frame with no file: an import folded at the outer end); control characters in names
/// are escaped.
pub fn frame_location(f: &Frame) -> String {
    let file = printable(&f.filename);
    if file.is_empty() && !f.function.is_empty() {
        return printable(&f.function).into_owned();
    }
    match (f.line, f.function.is_empty()) {
        (0, true) => file.into_owned(),
        (_, true) => format!("{file}:{}", f.line),
        _ => format!("{file}:{} in {}", f.line, printable(&f.function)),
    }
}

/// The location of a site: its innermost frame.
pub fn site_location(frames: &[Frame]) -> String {
    frames
        .first()
        .map_or_else(|| NO_PYTHON_FRAME.to_owned(), frame_location)
}

/// Right-aligns the numeric columns and left-aligns the last one.
struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
    /// Lines printed under a row (a traceback), indented.
    extra: Vec<Vec<String>>,
}

impl Table {
    fn new(headers: Vec<&'static str>) -> Self {
        Self {
            headers,
            rows: Vec::new(),
            extra: Vec::new(),
        }
    }

    fn row(&mut self, cells: Vec<String>, extra: Vec<String>) {
        self.rows.push(cells);
        self.extra.push(extra);
    }

    fn render(&self, out: &mut String) {
        let n = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |out: &mut String, cells: &[&str]| {
            let mut s = String::new();
            for (i, cell) in cells.iter().enumerate() {
                if i + 1 == n {
                    s.push_str(cell);
                } else {
                    let pad = widths[i].saturating_sub(cell.chars().count());
                    s.extend(std::iter::repeat(' ').take(pad));
                    s.push_str(cell);
                    s.push_str("  ");
                }
            }
            out.push_str(s.trim_end());
            out.push('\n');
        };
        line(out, &self.headers);
        let indent: usize = widths[..n - 1].iter().map(|w| w + 2).sum();
        for (row, extra) in self.rows.iter().zip(&self.extra) {
            let cells: Vec<&str> = row.iter().map(String::as_str).collect();
            line(out, &cells);
            for e in extra {
                let _ = writeln!(out, "{:indent$}{e}", "");
            }
        }
    }
}

/// Whether memory other than the Python heap was recorded (then totals are split).
pub fn has_several_sources(r: &ReplayResult) -> bool {
    [&r.peak_by_source, &r.end_by_source].iter().any(|s| {
        s.iter()
            .any(|(src, b)| src != MemorySource::Python && b > 0)
    })
}

/// `python 1.2 MB, native 3.4 MB, framework 0 B, mlx 0 B`.
pub fn source_split_text(split: &SourceSplit) -> String {
    split
        .iter()
        .map(|(src, bytes)| format!("{} {}", src.name(), human_size(bytes)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The process' peak RSS against the recorded peak: RSS above it is memory memtape did
/// not see (statically linked allocators, the interpreter's own); below it, allocated
/// memory that was never touched.
fn rss_text(rss: u64, recorded: u64) -> String {
    if rss > recorded {
        format!(
            "{} ({} more than the recorded peak: not seen by memtape)",
            human_size(rss),
            human_size(rss - recorded)
        )
    } else {
        format!(
            "{} (below the recorded peak: allocated memory not all touched)",
            human_size(rss)
        )
    }
}

/// The loaded objects with an allocator of their own (not seen by memtape).
pub(crate) fn private_allocators_text(run: &RunInfo) -> String {
    let names: Vec<String> = run
        .private_allocators
        .iter()
        .map(|p| format!("{} ({})", p.path, p.allocator))
        .collect();
    format!("{}: not seen by memtape", names.join(", "))
}

/// Summary of a replay: duration, events, peak, what was live at the end.
pub fn stats_text(run: &RunInfo, r: &ReplayResult) -> String {
    let mut rows: Vec<(&str, String)> = Vec::new();
    if let Some(src) = &run.source {
        rows.push(("Capture", src.clone()));
    }
    if let Some(cmd) = run.command_line() {
        rows.push(("Command line", cmd));
    }
    if let Some(py) = &run.python {
        rows.push(("Python", py.clone()));
    }
    if let Some(pid) = run.pid {
        rows.push(("PID", pid.to_string()));
    }
    let mut duration = human_duration(r.duration_ns);
    if run.cut_short {
        duration.push_str(" (cut short: the recording did not end cleanly)");
    } else if let Some(exit) = &run.exit {
        match run.exit_code {
            Some(code) => {
                let _ = write!(duration, " (exit: {exit}, status {code})");
            }
            None => {
                let _ = write!(duration, " (exit: {exit})");
            }
        }
    }
    rows.push(("Duration", duration));
    for (_, v) in &mut rows {
        if v.chars().any(char::is_control) {
            *v = printable(v).into_owned();
        }
    }
    let t = &r.totals;
    rows.push((
        "Allocations",
        format!("{} ({})", grouped(t.allocs), human_size(t.bytes_allocated)),
    ));
    let mut frees = format!("{} ({})", grouped(t.frees), human_size(t.bytes_freed));
    if t.unknown_frees > 0 {
        let _ = write!(frees, ", {}", unknown_frees(t.unknown_frees));
    }
    rows.push(("Frees", frees));
    rows.push((
        "Peak memory",
        format!(
            "{} in {} blocks at {} (event {})",
            human_size(r.peak.bytes),
            grouped(r.peak.blocks),
            human_duration(r.peak.time_ns),
            grouped(r.peak.event_index)
        ),
    ));
    let split = has_several_sources(r);
    if split {
        rows.push(("  by source", source_split_text(&r.peak_by_source)));
    }
    rows.push((
        "Live at end",
        format!(
            "{} in {} blocks",
            human_size(r.end_bytes),
            grouped(r.end_blocks)
        ),
    ));
    if split {
        rows.push(("  by source", source_split_text(&r.end_by_source)));
    }
    if let Some(account) = RssAccount::of(run, r.peak.bytes, r.end_bytes) {
        rows.extend(
            account
                .rows()
                .into_iter()
                .map(|(_, name, text)| (name, text)),
        );
    } else if let Some(rss) = run.max_rss_bytes.filter(|&b| b > 0) {
        rows.push(("Peak RSS", rss_text(rss, r.peak.bytes)));
    }
    if !run.private_allocators.is_empty() {
        rows.push(("Own allocators", private_allocators_text(run)));
    }
    if let Some(n) = run.native_unknown_frees.filter(|&n| n > 0) {
        rows.push((
            "Native frees",
            format!(
                "{} frees of memory allocated before tracing started (ignored)",
                grouped(n)
            ),
        ));
    }
    if let Some(n) = run.native_missed_reentrant.filter(|&n| n > 0) {
        rows.push((
            "Native calls",
            format!(
                "{} made in signal handlers while memtape was recording (not recorded)",
                grouped(n)
            ),
        ));
    }
    if r.dropped > 0 {
        rows.push(("Dropped events", grouped(r.dropped)));
    }
    if t.untracked > 0 {
        rows.push(("Untracked allocations", grouped(t.untracked)));
    }
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    let mut out = String::new();
    for (k, v) in &rows {
        let _ = writeln!(out, "{:<width$} {v}", format!("{k}:"));
    }
    for m in &r.markers {
        let _ = writeln!(
            out,
            "{:<width$} {} at {} (event {})",
            "Marker:",
            printable(&m.label),
            human_duration(m.time_ns),
            grouped(m.event_index)
        );
    }
    out
}

/// The biggest `limit` sites, with their share of `total` bytes. Sites with more than one
/// frame (per traceback) list the callers under the row.
pub fn top_text(sites: &[Site], total: u64, limit: usize) -> String {
    let mut t = Table::new(vec!["#", "Size", "Share", "Count", "Location"]);
    for (i, s) in sites.iter().take(limit).enumerate() {
        let extra = s
            .frames
            .iter()
            .skip(1)
            .map(|f| format!("called from {}", frame_location(f)))
            .collect();
        t.row(
            vec![
                (i + 1).to_string(),
                human_size(s.bytes),
                percent(s.bytes, total),
                grouped(s.count),
                site_location(&s.frames),
            ],
            extra,
        );
    }
    let mut out = String::new();
    t.render(&mut out);
    if sites.len() > limit {
        let rest: u64 = sites[limit..].iter().map(|s| s.bytes).sum();
        let _ = writeln!(
            out,
            "... and {} more sites ({})",
            grouped((sites.len() - limit) as u64),
            human_size(rest)
        );
    }
    out
}

/// The `limit` biggest differences, then the totals.
pub fn diff_text(rows: &[SiteDiff], limit: usize) -> String {
    let mut t = Table::new(vec!["Size", "Diff", "Count", "Diff", "Location"]);
    for r in rows.iter().take(limit) {
        t.row(
            vec![
                human_size(r.bytes),
                human_size_diff(r.bytes_diff),
                grouped(r.count),
                signed_count(r.count_diff),
                site_location(&r.frames),
            ],
            Vec::new(),
        );
    }
    let mut out = String::new();
    t.render(&mut out);
    let bytes: u64 = rows.iter().map(|r| r.bytes).sum();
    let diff: i64 = rows
        .iter()
        .map(|r| r.bytes_diff)
        .fold(0i64, i64::saturating_add);
    if rows.len() > limit {
        let _ = writeln!(
            out,
            "... and {} more sites",
            grouped((rows.len() - limit) as u64)
        );
    }
    let _ = writeln!(
        out,
        "Total: {} ({})",
        human_size(bytes),
        human_size_diff(diff)
    );
    out
}

#[cfg(test)]
mod tests;
