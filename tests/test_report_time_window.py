"""The HTML report's time-window view, driven in headless Chromium.

A program with distinct phases is recorded: an import that allocates at module level
(kept), phase one holds 20 MB from one line and frees it, phase two keeps 15 MB from
another. The page is loaded once and a script clicks, drags and toggles like a user, by
dispatching mouse events on the chart at the phase markers' positions, and reads the
flame graph and top sites after each step: a click in phase one shows phase one's line
and not phase two's, a drag over phase two the reverse, "Back to the peak" restores the
default view, the import select changes the stacks, and the CSV download holds the
chart's points split by source.
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
  const mode = document.getElementById("import-mode");
  for (const value of ["hide", "fold"]) {
    mode.value = value;
    mode.dispatchEvent(new Event("change"));
    steps["drag_" + value] = read();
  }
  document.getElementById("window-reset").click();
  steps.peak_fold = read();
  mode.value = "all";
  mode.dispatchEvent(new Event("change"));
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
        self.report = root / "report.html"
        ok(memtape("report", self.capture, "-o", self.report))
        self.csv = root / "timeline.csv"
        ok(memtape("export", self.capture, "--format", "csv", "-o", self.csv))
        self.stats = read_json("stats", self.capture)

    def site(self, tag: str, function: str) -> str:
        path = self.module if tag == "module-level" else self.script
        return f"{path}:{line_of(path, tag)} in {function}"


@pytest.fixture(scope="module")
def steps(browser: HeadlessChromium, tmp_path_factory: pytest.TempPathFactory) -> Any:
    rec = Recording(tmp_path_factory.mktemp("window"))
    page = browser.load(rec.report, DRIVE)
    assert page.problems() == [], "\n".join(page.problems())
    return rec, page.value


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
    assert any(t.startswith("phase_one (") for t in frame_texts(click))
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


def test_import_frames_hidden_or_folded(steps: Any) -> None:
    rec, s = steps
    importing = rec.site("importing", "<module>")
    module_level = rec.site("module-level", "<module>")
    peak = s["peak"]
    # Shown: the import machinery sits between the importing line and the module.
    assert any("<frozen importlib._bootstrap>" in t for t in frame_texts(peak)), frame_texts(peak)
    assert module_level in locs(peak)
    hide = s["drag_hide"]
    assert not any("<frozen importlib" in t for t in frame_texts(hide))
    assert locs(hide)[0] == rec.site("phase-two", "phase_two")
    # Folded, at the peak: the module's table belongs to the line that imported it.
    fold = s["peak_fold"]
    assert fold["view"] == "peak" and fold["sitesTable"] == "window-sites"
    assert not any("<frozen importlib" in t for t in frame_texts(fold))
    assert not any("window_mod.py" in t for t in frame_texts(fold)), frame_texts(fold)
    folded = [x for x in fold["sites"] if x["loc"] == importing]
    assert folded and folded[0]["bytes"] >= 12 * MiB, fold["sites"]
    assert module_level not in locs(fold)


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
