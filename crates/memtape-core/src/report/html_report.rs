//! The offline HTML report: one self-contained page (no network, no external URL) with
//! the run's metadata, memory over time, the flame graph at the peak, the top sites and
//! the leaks.
//!
//! Stable hooks for tests and scripts: `#run-metadata` (rows `data-key`), `#summary`
//! (`#peak-bytes`, `#end-bytes` with `data-bytes`), `#memory-chart` (an inline SVG with
//! `#peak-marker`), `#flamegraph`, `#top-sites` and `#leaks` (tables whose rows are
//! `tr.site` with `data-bytes` and `data-count`; each site's tracebacks sit in a
//! `<details>`).

use std::fmt::Write as _;

use crate::trace_set::GroupBy;

use super::flamegraph::{flame_section, FlameGraph, FLAMEGRAPH_JS, REPORT_CSS};
use super::html::{escape, push_escaped};
use super::memory_chart::memory_chart;
use super::replay::ReplayResult;
use super::rss_account::RssAccount;
use super::run_info::RunInfo;
use super::sites::{group_sites_with_tracebacks, SiteDetail};
use super::symbols::Symbols;
use super::text::{frame_location, site_location};
use super::time_window_html::{time_window_controls, TIME_WINDOW_JS};
use super::units::{grouped, human_duration, human_size, percent};

/// What the report shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HtmlReportOptions {
    /// Rows of the top-sites and leaks tables.
    pub top: usize,
    /// Tracebacks listed under each site.
    pub tracebacks_per_site: usize,
}

impl Default for HtmlReportOptions {
    fn default() -> Self {
        Self {
            top: 50,
            tracebacks_per_site: 5,
        }
    }
}

/// The whole page.
pub fn html_report(
    run: &RunInfo,
    r: &ReplayResult,
    symbols: &Symbols,
    options: &HtmlReportOptions,
) -> String {
    let title = match run.command_line() {
        Some(cmd) => format!("memtape report: {cmd}"),
        None => "memtape report".to_owned(),
    };
    let mut out = String::with_capacity(64 * 1024);
    let _ = write!(
        out,
        concat!(
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n",
            "<title>{title}</title>\n<style>\n{css}</style>\n</head>\n<body>\n",
            "<h1 id=\"title\">{title}</h1>\n",
            "<p class=\"subtitle\" id=\"subtitle\">Peak {peak} at {when}; {allocs} allocations; ",
            "{duration} recorded{cut}</p>\n"
        ),
        title = escape(&title),
        css = REPORT_CSS,
        peak = human_size(r.peak.bytes),
        when = human_duration(r.peak.time_ns),
        allocs = grouped(r.totals.allocs),
        duration = human_duration(r.duration_ns),
        cut = if run.cut_short { " (cut short)" } else { "" },
    );
    metadata(&mut out, run, r);
    summary(&mut out, r);
    out.push_str("<section id=\"timeline\">\n<h2>Memory over time</h2>\n");
    memory_chart(&mut out, r);
    time_window_controls(&mut out, r, symbols);
    out.push_str("</section>\n");

    let graph = FlameGraph::new(&r.live_at_peak, symbols);
    let _ = write!(
        out,
        concat!(
            "<section id=\"peak-flamegraph\">\n<h2>Live memory at the peak</h2>\n",
            "<p class=\"note\">{peak} live at {when}, by call stack (outermost at the top). ",
            "Width is proportional to bytes; click a frame to zoom in.</p>\n{section}</section>\n"
        ),
        peak = human_size(r.peak.bytes),
        when = human_duration(r.peak.time_ns),
        section = flame_section("flamegraph", &graph),
    );

    let top = group_sites_with_tracebacks(
        &r.live_at_peak,
        symbols,
        GroupBy::Lineno,
        options.tracebacks_per_site,
    );
    out.push_str("<section id=\"top-sites-section\">\n<h2>Top allocation sites at the peak</h2>\n");
    sites_table(&mut out, "top-sites", &top, r.peak.bytes, options.top);
    out.push_str("</section>\n");

    let leaks = group_sites_with_tracebacks(
        &r.live_at_end,
        symbols,
        GroupBy::Lineno,
        options.tracebacks_per_site,
    );
    let _ = write!(
        out,
        concat!(
            "<section id=\"leaks-section\">\n<h2>Leaks: still live at the end</h2>\n",
            "<p class=\"note\">{bytes} in {blocks} blocks allocated and never freed before the ",
            "recording {ended}.</p>\n"
        ),
        bytes = human_size(r.end_bytes),
        blocks = grouped(r.end_blocks),
        ended = if run.cut_short {
            "was cut short"
        } else {
            "ended"
        },
    );
    if leaks.is_empty() {
        out.push_str("<p id=\"no-leaks\">Nothing was left live.</p>\n");
    } else {
        sites_table(&mut out, "leaks", &leaks, r.end_bytes, options.top);
    }
    out.push_str("</section>\n");

    let _ = write!(
        out,
        "<div id=\"fg-tip\"></div>\n<script>\n{FLAMEGRAPH_JS}{TIME_WINDOW_JS}</script>\n</body>\n</html>\n"
    );
    out
}

fn metadata(out: &mut String, run: &RunInfo, r: &ReplayResult) {
    let mut rows: Vec<(&str, &str, String)> = Vec::new();
    if let Some(s) = &run.source {
        rows.push(("source", "Capture file", s.clone()));
    }
    rows.push((
        "argv",
        "Command line",
        run.command_line().unwrap_or_else(|| "unknown".to_owned()),
    ));
    if let Some(c) = &run.command {
        rows.push(("command", "Run as", c.clone()));
    }
    rows.push((
        "python",
        "Python",
        run.python.clone().unwrap_or_else(|| "unknown".to_owned()),
    ));
    if let Some(p) = &run.platform {
        rows.push(("platform", "Platform", p.clone()));
    }
    rows.push((
        "pid",
        "PID",
        run.pid
            .map_or_else(|| "unknown".to_owned(), |p| p.to_string()),
    ));
    rows.push(("duration", "Duration", human_duration(r.duration_ns)));
    rows.push((
        "cut-short",
        "Cut short",
        if run.cut_short {
            "yes: the recording did not end cleanly (killed, or the disk filled up); \
             this report covers everything up to the last complete block"
                .to_owned()
        } else {
            "no".to_owned()
        },
    ));
    if let Some(e) = &run.exit {
        rows.push(("exit", "Exit", e.clone()));
    }
    if let Some(code) = run.exit_code {
        rows.push(("exit-code", "Exit status", code.to_string()));
    }
    if r.dropped > 0 {
        rows.push(("dropped", "Dropped events", grouped(r.dropped)));
    }
    if let Some(account) = RssAccount::of(run, r.peak.bytes, r.end_bytes) {
        rows.push(("recorded-peak", "Recorded peak", human_size(r.peak.bytes)));
        rows.extend(
            account
                .rows()
                .into_iter()
                .map(|(key, name, text)| (key, name.trim_start(), text)),
        );
    } else if let Some(rss) = run.max_rss_bytes.filter(|&b| b > 0) {
        rows.push(("peak-rss", "Peak RSS", human_size(rss)));
        rows.push(("recorded-peak", "Recorded peak", human_size(r.peak.bytes)));
        rows.push((
            "untracked-rss",
            "Untracked RSS",
            format!(
                "{} (peak RSS beyond the recorded peak: memory memtape did not see)",
                human_size(run.untracked_rss(r.peak.bytes).unwrap_or(0))
            ),
        ));
    }
    if !run.private_allocators.is_empty() {
        rows.push((
            "private-allocators",
            "Own allocators",
            super::text::private_allocators_text(run),
        ));
    }
    if let Some(v) = &run.tool_version {
        rows.push(("tool-version", "memtape version", v.clone()));
    }
    out.push_str("<section id=\"metadata\">\n<h2>Run</h2>\n<table id=\"run-metadata\">\n");
    for (key, name, value) in rows {
        let _ = writeln!(
            out,
            "<tr data-key=\"{key}\"><th>{name}</th><td>{}</td></tr>",
            escape(&value)
        );
    }
    out.push_str("</table>\n</section>\n");
}

fn summary(out: &mut String, r: &ReplayResult) {
    let t = &r.totals;
    let _ = write!(
        out,
        concat!(
            "<section id=\"summary\">\n<h2>Summary</h2>\n<table>\n",
            "<tr><th>Peak memory</th><td class=\"num\" id=\"peak-bytes\" data-bytes=\"{pb}\" ",
            "data-time-ns=\"{pt}\" data-event-index=\"{pe}\">{peak}</td>",
            "<td>in {pblocks} blocks at {pwhen}</td></tr>\n",
            "<tr><th>Live at end</th><td class=\"num\" id=\"end-bytes\" data-bytes=\"{eb}\">{end}</td>",
            "<td>in {eblocks} blocks</td></tr>\n",
            "<tr><th>Allocations</th><td class=\"num\" id=\"allocs\" data-count=\"{a}\">{ah}</td>",
            "<td>{abytes} in total</td></tr>\n",
            "<tr><th>Frees</th><td class=\"num\" id=\"frees\" data-count=\"{f}\">{fh}</td>",
            "<td>{fbytes} in total{unknown}</td></tr>\n",
            "</table>\n</section>\n"
        ),
        pb = r.peak.bytes,
        pt = r.peak.time_ns,
        pe = r.peak.event_index,
        peak = human_size(r.peak.bytes),
        pblocks = grouped(r.peak.blocks),
        pwhen = human_duration(r.peak.time_ns),
        eb = r.end_bytes,
        end = human_size(r.end_bytes),
        eblocks = grouped(r.end_blocks),
        a = t.allocs,
        ah = grouped(t.allocs),
        abytes = human_size(t.bytes_allocated),
        f = t.frees,
        fh = grouped(t.frees),
        fbytes = human_size(t.bytes_freed),
        unknown = if t.unknown_frees > 0 {
            format!("; {}", super::text::unknown_frees(t.unknown_frees))
        } else {
            String::new()
        },
    );
    if super::text::has_several_sources(r) {
        // Before the table's end: one row per moment, each source a cell.
        out.truncate(out.len() - "</table>\n</section>\n".len());
        for (id, label, split) in [
            ("peak-by-source", "Peak by source", &r.peak_by_source),
            ("end-by-source", "End by source", &r.end_by_source),
        ] {
            let _ = write!(out, "<tr id=\"{id}\"><th>{label}</th>");
            for (source, bytes) in split.iter() {
                let _ = write!(
                    out,
                    "<td class=\"num\" data-source=\"{}\" data-bytes=\"{bytes}\">{} {}</td>",
                    source.name(),
                    source.name(),
                    human_size(bytes)
                );
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</table>\n</section>\n");
    }
}

fn sites_table(out: &mut String, id: &str, sites: &[SiteDetail], total: u64, limit: usize) {
    let _ = writeln!(
        out,
        concat!(
            "<table id=\"{id}\" data-rows=\"{rows}\" data-sites=\"{all}\">\n<thead><tr>",
            "<th class=\"num\">#</th><th class=\"num\">Size</th><th class=\"num\">Share</th>",
            "<th class=\"num\">Count</th><th>Location</th></tr></thead>\n<tbody>"
        ),
        id = escape(id),
        rows = sites.len().min(limit),
        all = sites.len(),
    );
    for (i, d) in sites.iter().take(limit).enumerate() {
        let s = &d.site;
        let _ = write!(
            out,
            concat!(
                "<tr class=\"site\" data-rank=\"{rank}\" data-bytes=\"{bytes}\" data-count=\"{count}\">",
                "<td class=\"num\">{rank}</td><td class=\"num\" title=\"{bytes} bytes\">{human}</td>",
                "<td class=\"num\">{share}</td><td class=\"num\">{hcount}</td><td>"
            ),
            rank = i + 1,
            bytes = s.bytes,
            count = s.count,
            human = human_size(s.bytes),
            share = percent(s.bytes, total),
            hcount = grouped(s.count),
        );
        out.push_str("<details><summary class=\"loc\">");
        push_escaped(out, &site_location(&s.frames));
        out.push_str("</summary>");
        for tb in &d.tracebacks {
            let _ = write!(
                out,
                "<ol class=\"traceback\" data-bytes=\"{}\" data-count=\"{}\">",
                tb.bytes, tb.count
            );
            for f in &tb.frames {
                out.push_str("<li>");
                push_escaped(out, &frame_location(f));
                out.push_str("</li>");
            }
            if tb.frames.is_empty() {
                out.push_str("<li>[no Python frame]</li>");
            }
            let _ = write!(
                out,
                "</ol><div class=\"note\">{} in {} blocks</div>",
                human_size(tb.bytes),
                grouped(tb.count)
            );
        }
        out.push_str("</details></td></tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
    if sites.len() > limit {
        let rest: u64 = sites[limit..].iter().map(|d| d.site.bytes).sum();
        let _ = writeln!(
            out,
            "<p class=\"note\">... and {} more sites ({}).</p>",
            grouped((sites.len() - limit) as u64),
            human_size(rest)
        );
    }
}

#[cfg(test)]
mod tests;
