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
use super::replay::ReplayResult;
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

const CHART_W: f64 = 1000.0;
const CHART_H: f64 = 260.0;
const PAD_LEFT: f64 = 80.0;
const PAD_RIGHT: f64 = 20.0;
const PAD_TOP: f64 = 20.0;
const PAD_BOTTOM: f64 = 30.0;

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
    if let Some(rss) = run.max_rss_bytes.filter(|&b| b > 0) {
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
            format!(
                "; {} of blocks not seen allocated (allocated before tracing began)",
                grouped(t.unknown_frees)
            )
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

/// An inline SVG line chart of the series, the peak marked, markers as dashed lines.
fn memory_chart(out: &mut String, r: &ReplayResult) {
    let points = &r.series;
    // With no time stamps to spread them, points go by event index.
    let by_time = r.duration_ns > 0;
    let x_of = |time_ns: u64, event_index: u64| if by_time { time_ns } else { event_index };
    let x_max = if by_time {
        r.duration_ns
    } else {
        r.events.saturating_sub(1)
    }
    .max(1) as f64;
    let y_max = points
        .iter()
        .map(|p| p.bytes)
        .max()
        .unwrap_or(0)
        .max(r.peak.bytes)
        .max(1) as f64;
    let plot_w = CHART_W - PAD_LEFT - PAD_RIGHT;
    let plot_h = CHART_H - PAD_TOP - PAD_BOTTOM;
    let sx = |x: u64| PAD_LEFT + plot_w * (x as f64 / x_max).min(1.0);
    let sy = |y: u64| PAD_TOP + plot_h * (1.0 - y as f64 / y_max);
    let base = PAD_TOP + plot_h;

    let _ = writeln!(
        out,
        concat!(
            "<svg id=\"memory-chart\" viewBox=\"0 0 {w} {h}\" role=\"img\" ",
            "aria-label=\"Live memory over time, peak {peak}\" data-peak-bytes=\"{pb}\" ",
            "data-points=\"{n}\" data-x-axis=\"{axis}\" data-x-max=\"{x_max}\" ",
            "data-plot-x0=\"{plot_x0}\" data-plot-x1=\"{plot_x1}\">"
        ),
        w = CHART_W,
        h = CHART_H,
        peak = human_size(r.peak.bytes),
        pb = r.peak.bytes,
        n = points.len(),
        axis = if by_time { "time" } else { "events" },
        x_max = x_max as u64,
        plot_x0 = PAD_LEFT,
        plot_x1 = CHART_W - PAD_RIGHT,
    );
    // Axes and labels.
    let _ = writeln!(
        out,
        "<line class=\"axis\" x1=\"{PAD_LEFT}\" y1=\"{base}\" x2=\"{}\" y2=\"{base}\"/>\
         <line class=\"axis\" x1=\"{PAD_LEFT}\" y1=\"{PAD_TOP}\" x2=\"{PAD_LEFT}\" y2=\"{base}\"/>",
        CHART_W - PAD_RIGHT
    );
    for frac in [0.0, 0.5, 1.0] {
        let y = (y_max * frac) as u64;
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            PAD_LEFT - 6.0,
            sy(y) + 4.0,
            human_size(y)
        );
        let x = (x_max * frac) as u64;
        let label = if by_time {
            human_duration(x)
        } else {
            format!("event {}", grouped(x))
        };
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"{}\">{}</text>",
            sx(x),
            base + 18.0,
            if frac == 0.0 {
                "start"
            } else if frac == 1.0 {
                "end"
            } else {
                "middle"
            },
            label
        );
    }
    if !points.is_empty() {
        let mut line = String::new();
        for p in points {
            let _ = write!(
                line,
                "{:.1},{:.1} ",
                sx(x_of(p.time_ns, p.event_index)),
                sy(p.bytes)
            );
        }
        let line = line.trim_end();
        let first = sx(x_of(points[0].time_ns, points[0].event_index));
        let last = sx(x_of(
            points[points.len() - 1].time_ns,
            points[points.len() - 1].event_index,
        ));
        let _ = writeln!(
            out,
            "<polygon class=\"area\" points=\"{first:.1},{base:.1} {line} {last:.1},{base:.1}\"/>\n\
             <polyline class=\"line\" points=\"{line}\"/>"
        );
    }
    for m in &r.markers {
        let x = sx(x_of(m.time_ns, m.event_index));
        let _ = write!(
            out,
            "<line class=\"marker\" x1=\"{x:.1}\" y1=\"{PAD_TOP}\" x2=\"{x:.1}\" y2=\"{base}\"><title>"
        );
        push_escaped(out, &m.label);
        let _ = writeln!(out, " at {}</title></line>", human_duration(m.time_ns));
        let short: String = m.label.chars().take(24).collect();
        let _ = write!(
            out,
            "<text class=\"marker-label\" x=\"{:.1}\" y=\"{:.1}\">",
            x + 3.0,
            PAD_TOP + 10.0
        );
        push_escaped(out, &short);
        out.push_str("</text>\n");
    }
    let _ = writeln!(
        out,
        concat!(
            "<circle id=\"peak-marker\" cx=\"{cx:.1}\" cy=\"{cy:.1}\" r=\"4.5\" data-bytes=\"{pb}\" ",
            "data-time-ns=\"{pt}\"><title>Peak: {peak} at {when}</title></circle>\n</svg>"
        ),
        cx = sx(x_of(r.peak.time_ns, r.peak.event_index)),
        cy = sy(r.peak.bytes),
        pb = r.peak.bytes,
        pt = r.peak.time_ns,
        peak = human_size(r.peak.bytes),
        when = human_duration(r.peak.time_ns),
    );
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
mod tests {
    use super::*;
    use crate::report::record::Record;
    use crate::report::replay::{Replay, ReplayOptions};

    const HOSTILE_SCRIPT: &str = "</script><script>alert(1)</script>";
    const HOSTILE_ATTR: &str = "\"><img src=x onerror=alert(1)>";

    fn records() -> Vec<Record<'static>> {
        vec![
            Record::String {
                id: 1,
                value: "app.py",
            },
            Record::String {
                id: 2,
                value: HOSTILE_SCRIPT,
            },
            Record::String {
                id: 3,
                value: HOSTILE_ATTR,
            },
            Record::Frame {
                id: 1,
                filename: 1,
                name: 2,
                line: 4,
            },
            Record::Frame {
                id: 2,
                filename: 3,
                name: 3,
                line: 8,
            },
            Record::Time { ns: 1_000 },
            Record::Alloc {
                domain: 0,
                addr: 0x1000,
                size: 4096,
                stack: 1,
            },
            Record::Alloc {
                domain: 0,
                addr: 0x3000,
                size: 100,
                stack: 2,
            },
            Record::Marker {
                label: HOSTILE_SCRIPT,
            },
            Record::Time { ns: 2_000_000 },
            Record::Free {
                domain: None,
                addr: 0x1000,
            },
            Record::Alloc {
                domain: 0,
                addr: 0x5000,
                size: 7,
                stack: 77,
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
        ]
    }

    fn report(run: &RunInfo) -> String {
        let mut symbols = Symbols::new();
        let mut replay = Replay::new(ReplayOptions::default());
        for r in &records() {
            symbols.feed(r);
            replay.feed(r);
        }
        html_report(
            run,
            &replay.finish(),
            &symbols,
            &HtmlReportOptions::default(),
        )
    }

    #[test]
    fn report_has_its_sections_and_no_network() {
        let run = RunInfo {
            argv: vec!["app.py".into(), HOSTILE_ATTR.into()],
            python: Some("3.11.7".into()),
            pid: Some(1234),
            cut_short: true,
            ..RunInfo::default()
        };
        let html = report(&run);
        for id in [
            "id=\"run-metadata\"",
            "id=\"memory-chart\"",
            "id=\"peak-marker\"",
            "id=\"flamegraph\"",
            "id=\"top-sites\"",
            "id=\"leaks\"",
            "data-key=\"cut-short\"",
        ] {
            assert!(html.contains(id), "missing {id}");
        }
        assert!(!html.to_lowercase().contains("http"));
        assert!(!html.contains("innerHTML"));
        assert!(html.contains("id=\"peak-bytes\" data-bytes=\"4196\""));
        // Top sites at the peak: app.py:4 (4096 B), then the hostile file's line 8.
        let top = &html[html.find("id=\"top-sites\"").unwrap()..];
        let rows: Vec<&str> = top.split("<tr class=\"site\"").skip(1).take(2).collect();
        assert!(rows[0].contains("data-bytes=\"4096\""));
        assert!(rows[1].contains("data-bytes=\"100\""));
        // Leaks: the unresolved stack's 7 B and the 100 B block.
        let leaks = &html[html.find("id=\"leaks\"").unwrap()..];
        assert!(leaks.contains("&lt;unresolved&gt;"));
        assert_eq!(leaks.matches("<tr class=\"site\"").count(), 2);
    }

    #[test]
    fn hostile_names_render_as_text() {
        let run = RunInfo {
            argv: vec![HOSTILE_SCRIPT.into(), HOSTILE_ATTR.into()],
            source: Some(HOSTILE_ATTR.into()),
            ..RunInfo::default()
        };
        let html = report(&run);
        assert!(!html.contains(HOSTILE_SCRIPT));
        assert!(!html.contains(HOSTILE_ATTR));
        assert!(!html.contains("<img"));
        // The script, the flame graph's data, the time-window data and the CSV.
        assert_eq!(html.matches("<script").count(), 4);
        assert_eq!(html.matches("</script>").count(), 4);
        assert!(html.contains("&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;"));
    }

    #[test]
    fn empty_recording_still_renders() {
        let html = html_report(
            &RunInfo::default(),
            &ReplayResult::default(),
            &Symbols::new(),
            &HtmlReportOptions::default(),
        );
        assert!(html.contains("id=\"no-leaks\""));
        assert!(html.contains("id=\"top-sites\" data-rows=\"0\""));
        assert!(!html.contains("NaN"));
    }
}
