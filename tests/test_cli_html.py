"""The HTML report and flame graph, opened in headless Chromium.

Each page is loaded from disk in a fresh tab (``headless_chromium``); after its scripts
ran, the test reads the page's own DOM and checks that the page logged no error, threw
no exception (syntax errors included), opened no dialog and requested nothing from the
network (every host name resolves to nothing, and every request is recorded).

Chromium is required: when it is missing or does not start, these tests fail with the
reason (CI installs Debian's ``chromium``; see ``headless_chromium``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from child_python import describe
from headless_chromium import HeadlessChromium, PageVisit
from memtape_cli import capture_blocks, memtape, ok, read_json, record, within, write_program
from source_lines import line_of

MiB = 2**20

PROGRAM = """
import memtape._native as native

leaks = []


def make_peak():
    buf = bytearray(20 * 2**20)  # @tm:peak
    native.mark("at the peak")
    return len(buf)


def leak():
    for _ in range(100):
        leaks.append(bytearray(10_000))  # @tm:leak


make_peak()
leak()
"""

HOSTILE_FUNCTION = "</script><script>alert(1)</script>"
HOSTILE_FILE = '"><img src=x onerror=alert(2)>.py'
HOSTILE_MARK = "<img src=y onerror=alert(3)>"

HOSTILE = f"""
import types
import memtape._native as native


def template():
    return bytearray(30 * 2**20)  # @tm:hostile


code = template.__code__.replace(co_name={HOSTILE_FUNCTION!r}, co_qualname={HOSTILE_FUNCTION!r})
keep = types.FunctionType(code, globals())()
native.mark({HOSTILE_MARK!r})
"""

# Read after the page's scripts ran: what the page shows, from its own DOM.
READ_PAGE = r"""
(() => {
  const q = (s) => document.querySelector(s);
  const num = (el, key) => (el && el.dataset[key] !== undefined ? Number(el.dataset[key]) : null);
  const rows = (table) => [...document.querySelectorAll(table + " tr.site")].map((tr) => ({
    rank: num(tr, "rank"), bytes: num(tr, "bytes"), count: num(tr, "count"),
    loc: (tr.querySelector("summary.loc") || tr).textContent,
  }));
  const meta = {};
  for (const tr of document.querySelectorAll("#run-metadata tr[data-key]")) {
    meta[tr.dataset.key] = tr.querySelector("td").textContent;
  }
  const chart = q("#memory-chart");
  return {
    title: document.title,
    ids: [...document.querySelectorAll("[id]")].map((e) => e.id),
    topSites: rows("#top-sites"),
    leaks: q("#leaks") ? rows("#leaks") : null,
    noLeaks: q("#no-leaks") !== null,
    meta,
    peakBytes: num(q("#peak-bytes"), "bytes"),
    endBytes: num(q("#end-bytes"), "bytes"),
    chart: chart ? chart.tagName.toLowerCase() : null,
    chartPoints: chart && chart.querySelector("polyline")
      ? chart.querySelector("polyline").getAttribute("points").trim().split(/\s+/).length : 0,
    peakMarker: chart ? num(chart.querySelector("#peak-marker"), "bytes") : null,
    chartText: chart ? chart.textContent : "",
    frames: [...document.querySelectorAll("#flamegraph .fg-frame")].map((e) => ({
      text: e.textContent, bytes: Number(e.dataset.bytes) })),
    images: document.querySelectorAll("img").length,
    runnable: [...document.scripts].filter((s) => s.type !== "application/json")
      .map((s) => s.textContent),
    text: document.body.textContent,
  };
})()
"""


class Pages:
    """The program's capture and its HTML pages."""

    def __init__(self, root: Path) -> None:
        self.script = write_program(root / "program.py", PROGRAM)
        self.capture = root / "program.mtape"
        record(self.script, self.capture)
        self.report = root / "report.html"
        self.flamegraph = root / "flamegraph.html"
        self.leaks = root / "leaks.html"
        ok(memtape("report", self.capture, "-o", self.report))
        ok(memtape("flamegraph", self.capture, "-o", self.flamegraph))
        ok(memtape("flamegraph", self.capture, "--leaks", "-o", self.leaks))
        self.stats = read_json("stats", self.capture)

    def site(self, tag: str) -> str:
        return f"{self.script}:{line_of(self.script, tag)}"

    def label(self, function: str, tag: str) -> str:
        """A flame-graph frame's label: the function, then the file's name and line."""
        return f"{function}  {self.script.name}:{line_of(self.script, tag)}"


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Pages:
    return Pages(tmp_path_factory.mktemp("html"))


def visit(browser: HeadlessChromium, path: Path) -> tuple[PageVisit, dict[str, Any]]:
    """Loads ``path``; fails on any console error, exception, dialog or request."""
    page = browser.load(path, READ_PAGE)
    assert page.problems() == [], f"{path.name}:\n" + "\n".join(page.problems())
    assert isinstance(page.value, dict)
    return page, page.value


def assert_offline_markup(path: Path) -> None:
    """Nothing in the file points at the network (scripts, styles, images, fonts)."""
    html = path.read_text(encoding="utf-8")
    remote = re.findall(
        r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//|@import|url\(\s*["']?https?:""", html
    )
    assert remote == [], remote


def test_report_in_chromium(browser: HeadlessChromium, pages: Pages) -> None:
    _, dom = visit(browser, pages.report)
    for element in ("run-metadata", "peak-bytes", "end-bytes", "memory-chart", "peak-marker",
                    "flamegraph", "top-sites", "leaks"):  # fmt: skip
        assert element in dom["ids"], element
    assert dom["noLeaks"] is False

    # Numbers agree with `memtape stats`.
    assert dom["peakBytes"] == pages.stats["peak"]["bytes"] >= 20 * MiB
    assert dom["endBytes"] == pages.stats["end"]["bytes"]
    assert dom["meta"]["cut-short"] == "no", dom["meta"]
    assert dom["meta"]["exit"] == "normal"

    # The known allocation tops the sites at the peak; the rows are in order.
    top = dom["topSites"]
    assert top, "no tr.site rows in #top-sites"
    assert top[0]["loc"] == f"{pages.site('peak')} in make_peak", top[0]
    assert within(top[0]["bytes"], 20 * MiB) and top[0]["count"] >= 1
    assert [r["rank"] for r in top] == list(range(1, len(top) + 1))
    assert [r["bytes"] for r in top] == sorted((r["bytes"] for r in top), reverse=True)

    # The leak tops the leaks table.
    assert dom["leaks"] and dom["leaks"][0]["loc"] == f"{pages.site('leak')} in leak"
    assert dom["leaks"][0]["bytes"] >= 100 * 10_000

    # The chart was drawn, with the peak marked; the marker label is there.
    assert dom["chart"] == "svg" and dom["chartPoints"] >= 2
    assert dom["peakMarker"] == pages.stats["peak"]["bytes"]
    assert "at the peak" in dom["chartText"]

    # The flame graph was drawn by its script, and shows the peak's frame.
    assert any(
        f["text"] == pages.label("make_peak", "peak") and within(f["bytes"], 20 * MiB)
        for f in dom["frames"]
    ), [f["text"] for f in dom["frames"]]
    assert_offline_markup(pages.report)


@pytest.mark.parametrize(
    ("which", "tag", "function"), [("flamegraph", "peak", "make_peak"), ("leaks", "leak", "leak")]
)
def test_flamegraph_in_chromium(
    browser: HeadlessChromium, pages: Pages, which: str, tag: str, function: str
) -> None:
    path = pages.flamegraph if which == "flamegraph" else pages.leaks
    _, dom = visit(browser, path)
    assert "flamegraph" in dom["ids"]
    frames = dom["frames"]
    assert frames, "the flame graph script drew no frames"
    root = max(frames, key=lambda f: f["bytes"])
    expected = pages.label(function, tag)
    matching = [f for f in frames if f["text"] == expected]
    assert matching, [f["text"] for f in frames]
    # The known site holds most of what the graph shows.
    assert matching[0]["bytes"] >= 0.5 * root["bytes"], (matching[0], root)
    assert_offline_markup(path)


def test_report_of_a_capture_cut_short(
    browser: HeadlessChromium, pages: Pages, tmp_path: Path
) -> None:
    data = pages.capture.read_bytes()
    _, blocks = capture_blocks(data)
    trailer_at, kind, _ = blocks[-1]
    assert kind == 2
    cut = tmp_path / "cut.mtape"
    cut.write_bytes(data[:trailer_at])
    report = tmp_path / "cut.html"
    result = ok(memtape("report", cut, "-o", report))
    assert "cut short" in result.stderr, describe(result)
    _, dom = visit(browser, report)
    assert dom["meta"]["cut-short"] != "no", dom["meta"]
    assert dom["topSites"][0]["loc"] == f"{pages.site('peak')} in make_peak"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(script, report, flamegraph) of a program whose file and function names are HTML."""
    root = tmp_path_factory.mktemp("hostile")
    script = write_program(root / HOSTILE_FILE, HOSTILE)
    capture = root / "hostile.mtape"
    record(script, capture)
    report, flamegraph = root / "hostile-report.html", root / "hostile-flamegraph.html"
    ok(memtape("report", capture, "-o", report))
    ok(memtape("flamegraph", capture, "-o", flamegraph))
    return script, report, flamegraph


def test_hostile_names_are_text_in_the_report(
    browser: HeadlessChromium, hostile: tuple[Path, Path, Path]
) -> None:
    script, report, _ = hostile
    page, dom = visit(browser, report)  # no dialog, no request: nothing ran or loaded
    assert page.dialogs == [] and dom["images"] == 0
    assert not [s for s in dom["runnable"] if "alert(" in s], dom["runnable"]
    site = f"{script}:{line_of(script, 'hostile')} in {HOSTILE_FUNCTION}"
    assert dom["topSites"][0]["loc"] == site, dom["topSites"][0]
    assert HOSTILE_MARK in dom["chartText"]
    hostile_frames = [f for f in dom["frames"] if HOSTILE_FUNCTION in f["text"]]
    assert hostile_frames, [f["text"] for f in dom["frames"]]
    assert HOSTILE_FILE in hostile_frames[0]["text"]


def test_hostile_names_are_text_in_the_flamegraph(
    browser: HeadlessChromium, hostile: tuple[Path, Path, Path]
) -> None:
    script, _, flamegraph = hostile
    page, dom = visit(browser, flamegraph)
    assert page.dialogs == [] and dom["images"] == 0
    assert not [s for s in dom["runnable"] if "alert(" in s], dom["runnable"]
    expected = f"{HOSTILE_FUNCTION}  {script.name}:{line_of(script, 'hostile')}"
    assert [f for f in dom["frames"] if f["text"] == expected], [f["text"] for f in dom["frames"]]


def test_the_harness_sees_errors_and_requests(browser: HeadlessChromium, tmp_path: Path) -> None:
    """A page with every fault these tests look for: each one is reported."""
    page = tmp_path / "faulty.html"
    page.write_text(
        "<!DOCTYPE html><html><body><p id=x>x</p>"
        "<script>console.error('logged error'); alert('dialog');</script>"
        "<script>this is not javascript(</script>"
        "<script>throw new Error('thrown at run time')</script>"
        "<img src='https://example.com/pixel.png'>"
        "</body></html>",
        encoding="utf-8",
    )
    visited = browser.load(page, "document.getElementById('x').textContent")
    assert visited.value == "x"
    problems = "\n".join(visited.problems())
    for expected in ("logged error", "dialog", "SyntaxError", "thrown at run time",
                     "https://example.com/pixel.png"):  # fmt: skip
        assert expected in problems, (expected, problems)


def test_pages_of_a_capture_with_no_events(
    browser: HeadlessChromium, pages: Pages, tmp_path: Path
) -> None:
    """A program killed before the first block was written: the pages still work."""
    data = pages.capture.read_bytes()
    header_end, _ = capture_blocks(data)
    empty = tmp_path / "header-only.mtape"
    empty.write_bytes(data[:header_end])
    report, flamegraph = tmp_path / "empty-report.html", tmp_path / "empty-flamegraph.html"
    ok(memtape("report", empty, "-o", report))
    ok(memtape("flamegraph", empty, "-o", flamegraph))
    _, dom = visit(browser, report)
    assert dom["noLeaks"] is True and dom["leaks"] is None
    assert dom["topSites"] == [] and dom["peakBytes"] == 0
    assert dom["meta"]["cut-short"] != "no"
    assert "Nothing was live here." in dom["text"]
    _, dom = visit(browser, flamegraph)
    assert "Nothing was live here." in dom["text"]
