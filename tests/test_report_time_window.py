"""The HTML report's time-window view, driven in headless Chromium.

A program with distinct phases is recorded: an import that allocates at module level
(kept), phase one holds 20 MB from one line and frees it, phase two keeps 15 MB from
another. The page is loaded once and a script clicks, drags and toggles like a user, by
dispatching mouse events on the chart at the phase markers' positions, and reads the
flame graph and top sites after each step: a click in phase one shows phase one's line
and not phase two's, a drag over phase two the reverse, "Back to the peak" restores the
default view, and the CSV download holds the chart's points split by source. The page is
made three ways (``--imports hide``, the default, ``fold`` and ``show``): every view of it
shows import machinery that way.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pytest
from headless_chromium import HeadlessChromium
from memtape_cli import memtape, ok, read_json, record, write_program
from source_lines import line_of

MiB = 2**20

IMPORTED = """
TABLE = bytearray(12 * 2**20)  # @tm:module-level
"""

PROGRAM = """
import time

import memtape

import window_mod  # @tm:importing


def churn():
    # Enough events for the recorder to stamp the time after a sleep.
    junk = [str(i) * 3 for i in range(3000)]
    return len(junk)


def phase_one():
    held = []
    for _ in range(10):
        held.append(bytearray(2 * 2**20))  # @tm:phase-one
    churn()
    memtape.mark("phase one")
    time.sleep(0.3)
    churn()
    del held
    churn()


kept = []


def phase_two():
    for _ in range(10):
        kept.append(bytearray(3 * 2**19))  # @tm:phase-two
    churn()
    time.sleep(0.3)
    churn()


churn()
phase_one()
time.sleep(0.1)
churn()
memtape.mark("phase two")
churn()
phase_two()
print(len(window_mod.TABLE))
"""

# Runs in the page: acts like a user and reads the page after each step.
DRIVE = r"""
(async () => {
  const chart = document.getElementById("memory-chart");
  const markerX = (label) => {
    for (const line of chart.querySelectorAll("line.marker")) {
      if (line.querySelector("title").textContent.startsWith(label + " at")) {
        return Number(line.getAttribute("x1"));
      }
    }
    throw new Error("no marker " + label);
  };
  const screen = (x) => {
    const p = chart.createSVGPoint();
    p.x = x; p.y = 100;
    return p.matrixTransform(chart.getScreenCTM());
  };
  const mouse = (target, type, x) => {
    const at = screen(x);
    target.dispatchEvent(new MouseEvent(type, {
      bubbles: true, cancelable: true, clientX: at.x, clientY: at.y, button: 0 }));
  };
  const read = () => {
    const status = document.getElementById("window-status");
    const table = document.getElementById("window-sites");
    const server = document.getElementById("top-sites");
    const visible = table && !table.hidden ? table : server;
    return {
      view: status.dataset.view,
      status: status.textContent,
      statusBytes: status.dataset.bytes === undefined ? null : Number(status.dataset.bytes),
      resetHidden: document.getElementById("window-reset").hidden,
      flameTitle: document.querySelector("#peak-flamegraph h2").textContent,
      frames: [...document.querySelectorAll("#flamegraph .fg-frame")].map((e) => ({
        text: e.textContent, bytes: Number(e.dataset.bytes) })),
      sitesTable: visible.id,
      sites: [...visible.querySelectorAll("tr.site")].map((tr) => ({
        loc: tr.querySelector("summary.loc").textContent,
        bytes: Number(tr.dataset.bytes), count: Number(tr.dataset.count) })),
      range: document.getElementById("window-range").getAttribute("display"),
    };
  };
  const steps = {};
  steps.peak = read();
  const one = markerX("phase one"), two = markerX("phase two");
  const plotEnd = Number(chart.dataset.plotX1);
  // A click halfway through phase one's sleep.
  mouse(chart, "mousedown", (one + two) / 2);
  mouse(window, "mouseup", (one + two) / 2);
  steps.click = read();
  // A drag from the start of phase two to the end of the recording.
  mouse(chart, "mousedown", two);
  mouse(chart, "mousemove", (two + plotEnd) / 2);
  mouse(window, "mouseup", plotEnd);
  steps.drag = read();
  document.getElementById("window-reset").click();
  steps.back = read();
  // The CSV button: catch the blob it hands to the download link.
  let blob = null;
  const createObjectURL = URL.createObjectURL;
  URL.createObjectURL = (b) => { blob = b; return "data:text/csv,"; };
  const click = HTMLAnchorElement.prototype.click;
  let downloaded = null;
  HTMLAnchorElement.prototype.click = function () { downloaded = this.download; };
  document.getElementById("timeline-csv").click();
  URL.createObjectURL = createObjectURL;
  HTMLAnchorElement.prototype.click = click;
  steps.csv = { name: downloaded, type: blob && blob.type, text: blob ? await blob.text() : null,
                points: Number(chart.dataset.points),
                peak: Number(document.getElementById("peak-bytes").dataset.bytes) };
  return steps;
})()
"""


class Recording:
    def __init__(self, root: Path) -> None:
        self.module = write_program(root / "window_mod.py", IMPORTED)
        self.script = write_program(root / "program.py", PROGRAM)
        self.capture = root / "program.mtape"
        record(self.script, self.capture, cwd=root)
        self.reports = {}
        for mode in ("hide", "fold", "show"):
            self.reports[mode] = root / f"report-{mode}.html"
            options = () if mode == "hide" else ("--imports", mode)
            ok(memtape("report", self.capture, "-o", self.reports[mode], *options))
        self.csv = root / "timeline.csv"
        ok(memtape("export", self.capture, "--format", "csv", "-o", self.csv))
        self.stats = read_json("stats", self.capture)

    def site(self, tag: str, function: str) -> str:
        path = self.module if tag == "module-level" else self.script
        return f"{path}:{line_of(path, tag)} in {function}"


@pytest.fixture(scope="module")
def steps(browser: HeadlessChromium, tmp_path_factory: pytest.TempPathFactory) -> Any:
    rec = Recording(tmp_path_factory.mktemp("window"))
    pages = {}
    for mode, report in rec.reports.items():
        page = browser.load(report, DRIVE)
        assert page.problems() == [], "\n".join(page.problems())
        pages[mode] = page.value
    # The default page (import machinery hidden) for the views; the others by mode.
    return rec, {**pages["hide"], "by_mode": pages}


def locs(step: dict[str, Any]) -> list[str]:
    return [s["loc"] for s in step["sites"]]


def frame_texts(step: dict[str, Any]) -> list[str]:
    return [f["text"] for f in step["frames"]]


def test_click_shows_the_moment(steps: Any) -> None:
    rec, s = steps
    one, two = rec.site("phase-one", "phase_one"), rec.site("phase-two", "phase_two")
    click = s["click"]
    assert click["view"] == "moment" and not click["resetHidden"], click["status"]
    assert click["range"] == "inline"
    assert click["sitesTable"] == "window-sites"
    # Phase one's 20 MiB are live, phase two's line is nowhere.
    assert locs(click)[0] == one, locs(click)
    # Each is a buffer (one byte more than asked) and a bytearray object.
    assert 20 * MiB < click["sites"][0]["bytes"] < 20 * MiB + 4096
    assert 20 <= click["sites"][0]["count"] <= 25  # and the list growing
    assert two not in locs(click)
    assert not [t for t in frame_texts(click) if "phase_two" in t], frame_texts(click)
    assert any(t.startswith("phase_one  program.py:") for t in frame_texts(click))
    assert click["statusBytes"] >= 32 * MiB  # phase one and the imported table


def test_drag_shows_what_the_window_kept(steps: Any) -> None:
    rec, s = steps
    one, two = rec.site("phase-one", "phase_one"), rec.site("phase-two", "phase_two")
    drag = s["drag"]
    assert drag["view"] == "window", drag["status"]
    assert locs(drag)[0] == two, locs(drag)
    assert 15 * MiB < drag["sites"][0]["bytes"] < 15 * MiB + 4096
    assert 20 <= drag["sites"][0]["count"] <= 25
    assert one not in locs(drag)
    assert not [t for t in frame_texts(drag) if "phase_one" in t], frame_texts(drag)
    # The import happened before the window: its table is not in it.
    assert rec.site("module-level", "<module>") not in locs(drag)
    assert drag["statusBytes"] < 16 * MiB


def test_back_to_the_peak(steps: Any) -> None:
    rec, s = steps
    peak, back = s["peak"], s["back"]
    assert peak["view"] == "peak" and peak["resetHidden"] and peak["range"] == "none"
    assert peak["sitesTable"] == "top-sites"
    # The peak is phase one beside the imported table.
    assert rec.stats["peak"]["bytes"] >= 32 * MiB
    assert locs(peak)[0] == rec.site("phase-one", "phase_one")
    for key in ("view", "frames", "sites", "sitesTable", "flameTitle", "resetHidden", "range"):
        assert back[key] == peak[key], key


def test_import_frames_hidden_folded_or_shown(steps: Any) -> None:
    rec, s = steps
    importing = rec.site("importing", "<module>")
    module_level = rec.site("module-level", "<module>")
    machinery = "<frozen importlib"
    # Shown: the import machinery sits between the importing line and the module.
    shown = s["by_mode"]["show"]["peak"]
    assert any("<frozen importlib._bootstrap>" in t for t in frame_texts(shown)), frame_texts(shown)
    assert module_level in locs(shown)
    # Hidden (the default), in every view: the module's table stays on its own line,
    # drawn right under the importing line.
    for step in ("peak", "click", "drag", "back"):
        assert not any(machinery in t for t in frame_texts(s[step])), (step, frame_texts(s[step]))
    assert module_level in locs(s["peak"])
    assert f"<module>  window_mod.py:{line_of(rec.module, 'module-level')}" in frame_texts(
        s["peak"]
    )
    assert locs(s["drag"])[0] == rec.site("phase-two", "phase_two")
    # Folded: the import is one frame at the importing line, the module's table in it.
    fold = s["by_mode"]["fold"]
    for step in ("peak", "click"):
        assert not any(machinery in t for t in frame_texts(fold[step]))
        assert not any("window_mod.py" in t for t in frame_texts(fold[step])), frame_texts(
            fold[step]
        )
    folded = [
        x
        for x in fold["peak"]["sites"]
        if x["loc"] == importing.replace("<module>", "[import window_mod]")
    ]
    assert folded and folded[0]["bytes"] >= 12 * MiB, fold["peak"]["sites"]
    assert module_level not in locs(fold["peak"])
    assert f"[import window_mod]  program.py:{line_of(rec.script, 'importing')}" in frame_texts(
        fold["peak"]
    )


def test_csv_download(steps: Any) -> None:
    rec, s = steps
    got = s["csv"]
    assert got["name"] == "memtape-timeline.csv" and got["type"] == "text/csv"
    assert got["text"] == rec.csv.read_text(encoding="utf-8")
    rows = list(csv.DictReader(io.StringIO(got["text"])))
    assert list(rows[0]) == [
        "time_s", "time_ns", "event_index",
        "python_bytes", "native_bytes", "framework_bytes", "mlx_bytes", "total_bytes",
    ]  # fmt: skip
    assert len(rows) == got["points"] >= 10
    for row in rows:
        sources = ("python_bytes", "native_bytes", "framework_bytes", "mlx_bytes")
        parts = sum(int(row[source]) for source in sources)
        assert parts == int(row["total_bytes"])
        assert float(row["time_s"]) * 1e9 == pytest.approx(int(row["time_ns"]), abs=1)
    assert [int(r["time_ns"]) for r in rows] == sorted(int(r["time_ns"]) for r in rows)
    assert max(int(r["total_bytes"]) for r in rows) == got["peak"] == rec.stats["peak"]["bytes"]
