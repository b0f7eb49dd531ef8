//! The report's memory-over-time chart: an inline SVG (`#memory-chart`) of the traced
//! bytes, with the peak marked (`#peak-marker`) and the run's markers.

use std::fmt::Write as _;

use super::html::push_escaped;
use super::replay::ReplayResult;
use super::units::{grouped, human_duration, human_size};

const CHART_W: f64 = 1000.0;
const CHART_H: f64 = 260.0;
const PAD_LEFT: f64 = 80.0;
const PAD_RIGHT: f64 = 20.0;
const PAD_TOP: f64 = 20.0;
const PAD_BOTTOM: f64 = 30.0;

/// An inline SVG line chart of the series, the peak marked, markers as dashed lines.
pub(super) fn memory_chart(out: &mut String, r: &ReplayResult) {
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
