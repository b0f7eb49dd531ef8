"""The HTML report of a ``--follow-children`` set: one self-contained page with a
process selector.

"All processes" shows the combined view: the combined peak (the highest sum of the
processes' live memory at one moment) beside the sum of their own peaks, a table of the
processes, memory over time on one clock (the sum and each process), the sites live at
the combined peak summed over the processes, and the combined flame graph. Choosing a
process shows that process' own report (the single-capture report, unchanged) in a
frame. The pages ride along as JSON strings and are loaded into the frame on demand, so
the page stays one file that works offline; ``#pid=N`` in the address selects a process.
"""

from __future__ import annotations

import json
from html import escape

from memtape.byte_size import format_size
from memtape.cli import process_set as ps
from memtape.cli import process_set_sites as pss
from memtape.cli.process_set_flame import combined_page

CHART_W, CHART_H = 900, 220
MAX_POINTS = 1500

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em;margin:0 0 .3em}
table{border-collapse:collapse;margin:.5em 0}
td,th{padding:.15em .6em;text-align:left;border-bottom:1px solid #ddd}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.note{color:#555}
#process-select{font-size:1em;padding:.2em}
svg text{font-size:11px;fill:#444}
.proc-line{fill:none;stroke-width:1;opacity:.7}
#combined-line{fill:none;stroke:#c0392b;stroke-width:2}
iframe{width:100%;border:1px solid #ccc;height:80vh}
#combined-flamegraph{height:60vh}
"""

SCRIPT = """
(function () {
  var select = document.getElementById("process-select");
  var combined = document.getElementById("combined-view");
  var single = document.getElementById("process-view");
  var frame = document.getElementById("process-report");
  var pages = JSON.parse(document.getElementById("process-reports").textContent);
  var flame = document.getElementById("combined-flamegraph");
  flame.srcdoc = JSON.parse(document.getElementById("combined-flamegraph-page").textContent);
  function show(value) {
    select.value = value;
    if (value === "all" || !(value in pages)) {
      select.value = "all";
      combined.hidden = false;
      single.hidden = true;
      frame.removeAttribute("srcdoc");
      frame.dataset.pid = "";
      return;
    }
    combined.hidden = true;
    single.hidden = false;
    frame.dataset.pid = value;
    frame.srcdoc = pages[value];
  }
  select.addEventListener("change", function () {
    history.replaceState(null, "", select.value === "all" ? "#" : "#pid=" + select.value);
    show(select.value);
  });
  var links = document.querySelectorAll("a.pick-process");
  for (var i = 0; i < links.length; i++) {
    links[i].addEventListener("click", function (e) {
      e.preventDefault();
      select.value = this.dataset.pid;
      select.dispatchEvent(new Event("change"));
    });
  }
  var m = /^#pid=(\\d+)$/.exec(location.hash);
  show(m ? m[1] : "all");
})();
"""


def _script_json(value: object) -> str:
    text = json.dumps(value, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _downsample(points: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """At most MAX_POINTS points, keeping each bucket's highest."""
    if len(points) <= MAX_POINTS:
        return points
    step = -(-len(points) // MAX_POINTS)
    return [max(points[i : i + step], key=lambda p: p[1]) for i in range(0, len(points), step)]


def _process_series(p: ps.Process, origin_ns: int) -> list[tuple[int, int]]:
    width, rows = p.capture.ticks
    offset = p.start_ns - origin_ns
    points = [(offset + index * width, top) for index, top, _ in rows]
    end = offset + int(p.summary.get("duration_ns") or 0)
    if points:
        points.append((max(end, points[-1][0]), rows[-1][2]))
        points.append((max(end, points[-1][0]), 0))
    return points


def _chart(pset: ps.ProcessSet, combined: ps.Combined) -> str:
    origin = pset.root.start_ns
    series = {p.pid: _downsample(_process_series(p, origin)) for p in pset.processes}
    total = _downsample(combined.series)
    t_max = max([t for s in [*series.values(), total] for t, _ in s] or [1]) or 1
    y_max = max(combined.peak_bytes, 1)

    def xy(t: int, b: int) -> str:
        return (
            f"{40 + t * (CHART_W - 50) / t_max:.1f},{CHART_H - 20 - b * (CHART_H - 40) / y_max:.1f}"
        )

    parts = [
        f'<svg id="combined-chart" width="{CHART_W}" height="{CHART_H}" '
        f'viewBox="0 0 {CHART_W} {CHART_H}" role="img" '
        'aria-label="Live memory over time, all processes">'
    ]
    palette = ("#2980b9", "#27ae60", "#8e44ad", "#d35400", "#16a085", "#7f8c8d")
    for i, p in enumerate(pset.processes):
        pts = " ".join(xy(t, b) for t, b in series[p.pid])
        color = palette[i % len(palette)]
        parts.append(
            f'<polyline class="proc-line" data-pid="{p.pid}" stroke="{color}" points="{pts}">'
            f"<title>{escape(p.label)}</title></polyline>"
        )
    pts = " ".join(xy(t, b) for t, b in total)
    parts.append(
        f'<polyline id="combined-line" points="{pts}"><title>all processes</title></polyline>'
    )
    px, py = xy(combined.peak_time_ns, combined.peak_bytes).split(",")
    parts.append(
        f'<circle id="combined-peak-marker" cx="{px}" cy="{py}" r="4" fill="#c0392b" '
        f'data-bytes="{combined.peak_bytes}"><title>combined peak</title></circle>'
    )
    parts.append(
        f'<text x="40" y="12">{escape(format_size(y_max))} (combined peak); '
        f"{t_max / 1e9:.3f} s</text></svg>"
    )
    return "".join(parts)


def _process_rows(pset: ps.ProcessSet, combined: ps.Combined) -> str:
    rows = []
    for p in pset.processes:
        peak = int(p.summary["peak"]["bytes"])
        allocated = int(p.summary["totals"]["bytes_allocated"])
        at_peak = combined.peak_by_pid.get(p.pid, 0)
        parent = "" if p.parent_pid is None else str(p.parent_pid)
        argv = " ".join(str(a) for a in p.meta.get("argv") or [])
        rows.append(
            f'<tr class="process" data-pid="{p.pid}" data-peak="{peak}" '
            f'data-at-combined-peak="{at_peak}" data-allocated="{allocated}">'
            f'<td><a href="#pid={p.pid}" class="pick-process" data-pid="{p.pid}">{p.pid}</a></td>'
            f"<td>{escape(parent)}</td><td>{escape(p.start_method)}</td>"
            f'<td class="num">{escape(format_size(peak))}</td>'
            f'<td class="num">{escape(format_size(at_peak))}</td>'
            f'<td class="num">{escape(format_size(allocated))}</td>'
            f"<td>{escape(ps.exit_text(p))}</td><td>{escape(argv)}</td></tr>"
        )
    head = (
        "<tr><th>PID</th><th>Parent</th><th>Started as</th><th class=num>Own peak</th>"
        "<th class=num>At the combined peak</th><th class=num>Allocated</th><th>Exit</th>"
        "<th>Command line</th></tr>"
    )
    return f'<table id="processes">{head}{"".join(rows)}</table>'


def _site_rows(sites: list[pss.SetSite], limit: int) -> str:
    rows = []
    for i, s in enumerate(sites[:limit], 1):
        pids = ", ".join(str(pid) for pid, b in sorted(s.by_pid.items()) if b)
        rows.append(
            f'<tr class="site" data-rank="{i}" data-bytes="{s.bytes}" data-count="{s.count}">'
            f'<td class="num">{i}</td><td class="num">{escape(format_size(s.bytes))}</td>'
            f'<td class="num">{s.count:,}</td><td class="loc">'
            f"{escape(pss.site_location(s.frames))}</td><td>{escape(pids)}</td></tr>"
        )
    head = (
        "<tr><th class=num>#</th><th class=num>Size</th><th class=num>Count</th>"
        "<th>Location</th><th>Processes</th></tr>"
    )
    return f'<table id="combined-sites">{head}{"".join(rows)}</table>'


def set_report(pset: ps.ProcessSet, top: int, source: str) -> str:
    """The whole page."""
    combined = pset.combined()
    sites = pss.combined_sites(pset, "lineno", "peak", combined)
    sum_of_peaks = sum(int(p.summary["peak"]["bytes"]) for p in pset.processes)
    flame = combined_page(pset, "peak", "memory live at the combined peak", source)
    options = "".join(f'<option value="{p.pid}">{escape(p.label)}</option>' for p in pset.processes)
    reports = {str(p.pid): p.capture.html_report(top) for p in pset.processes}
    n = len(pset.processes)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>memtape report: {n} processes</title>\n<style>{STYLE}</style>\n</head>\n"
        f"<body>\n<h1>memtape report: {n} processes</h1>\n"
        f'<p class="note">{escape(source)}: memtape run --follow-children</p>\n'
        '<p><label for="process-select">Process </label><select id="process-select">'
        f'<option value="all">All processes (combined)</option>{options}</select></p>\n'
        '<section id="combined-view">\n'
        f'<p id="combined-peak" data-bytes="{combined.peak_bytes}" '
        f'data-time-ns="{combined.peak_time_ns}" data-resolution-ns="{combined.resolution_ns}">'
        f"<b>Combined peak: {escape(format_size(combined.peak_bytes))}</b> at "
        f"{combined.peak_time_ns / 1e9:.3f} s: the highest sum of the processes' live memory "
        f"at one moment ({combined.resolution_ns / 1e6:.1f} ms ticks).</p>\n"
        f'<p id="sum-of-peaks" data-bytes="{sum_of_peaks}" class="note">The sum of each '
        f"process' own peak is {escape(format_size(sum_of_peaks))}; those peaks need not "
        "coincide.</p>\n"
        f"<h2>Processes</h2>\n{_process_rows(pset, combined)}\n"
        f"<h2>Memory over time</h2>\n{_chart(pset, combined)}\n"
        '<p class="note">Red: all processes summed; thin lines: each process.</p>\n'
        f"<h2>Top sites at the combined peak</h2>\n{_site_rows(sites, top)}\n"
        "<h2>Flame graph at the combined peak</h2>\n"
        '<iframe id="combined-flamegraph" title="combined flame graph"></iframe>\n'
        "</section>\n"
        '<section id="process-view" hidden>\n'
        '<iframe id="process-report" title="the selected process\' report"></iframe>\n'
        "</section>\n"
        f'<script type="application/json" id="process-reports">{_script_json(reports)}</script>\n'
        '<script type="application/json" id="combined-flamegraph-page">'
        f"{_script_json(flame)}</script>\n"
        f"<script>{SCRIPT}</script>\n</body>\n</html>\n"
    )
