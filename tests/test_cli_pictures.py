"""Reading the pictures: short flame-graph labels, import machinery hidden by default (or
folded, or shown, with ``--imports``), the report's timeline across the page, and one
number format in the terminal outputs.

The program imports a module whose import allocates two ways: the module's own top-level
code (``TABLE``) and the import machinery itself (compiling the module's big tuple
constant happens in importlib's frames). Pages are read in headless Chromium
(``headless_chromium``), as in ``test_cli_html``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from child_python import describe
from headless_chromium import HeadlessChromium
from memtape_cli import memtape, ok, read_json, record, write_program
from source_lines import line_of

MiB = 2**20
MACHINERY = ("<frozen importlib", "<frozen zipimport", "importlib/_bootstrap")

MAIN = """
import helper_mod  # @tm:import


def work():
    return bytearray(3 * 2**20)  # @tm:work


kept = work()
small = [bytearray(16) for _ in range(5000)]  # @tm:many
"""

# A module whose import allocates in its own code (TABLE) and in the machinery (the
# 2,000-int tuple is made while importlib compiles or unmarshals the module).
HELPER = "TABLE = bytearray(8 * 2**20)  # @tm:table\nDATA = ({})\n".format(
    ", ".join(str(1000 + i) for i in range(2_000))
)

# The flame graph as drawn: each frame's label, depth row, position, and the hover text.
READ_FLAME = r"""
(() => {
  const frames = [...document.querySelectorAll("#flamegraph .fg-frame")];
  const tip = document.getElementById("fg-tip");
  return {
    // The data blocks decoded (in the page, "<" is written \u003c).
    data: [...document.querySelectorAll("script[type='application/json']")]
      .map((s) => JSON.stringify(JSON.parse(s.textContent))).join("\n"),
    frames: frames.map((e) => {
      const r = e.getBoundingClientRect();
      e.dispatchEvent(new MouseEvent("mousemove", { bubbles: true, clientX: r.left + 1,
                                                     clientY: r.top + 1 }));
      return { text: e.textContent, bytes: Number(e.dataset.bytes), top: r.top,
               left: r.left, right: r.right, tip: tip.textContent };
    }),
    importMode: (() => {
      const e = document.getElementById("import-mode");
      return e ? { ...e.dataset } : null;
    })(),
    chartWidth: (() => {
      const c = document.getElementById("memory-chart");
      return c ? c.getBoundingClientRect().width : null;
    })(),
    contentWidth: (() => {
      const s = getComputedStyle(document.body);
      return document.body.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);
    })(),
    windowWidth: window.innerWidth,
  };
})()
"""


class Program:
    """The program, its capture, and the line numbers that matter."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.main = write_program(root / "main.py", MAIN)
        self.helper = root / "helper_mod.py"
        self.helper.write_text(HELPER, encoding="utf-8")
        self.capture = root / "main.mtape"
        record(self.main, self.capture, cwd=root)
        self.import_line = line_of(self.main, "import")
        self.table_line = line_of(self.helper, "table")

    def importing(self) -> str:
        return f"{self.main}:{self.import_line} in <module>"

    def table(self) -> str:
        return f"{self.helper}:{self.table_line} in <module>"

    def page(self, command: str, *options: str) -> Path:
        out = self.root / f"{command}-{'-'.join(o.strip('-') for o in options) or 'default'}.html"
        ok(memtape(command, self.capture, "-o", out, "--force", *options))
        return out


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Program:
    return Program(tmp_path_factory.mktemp("pictures"))


def read_flame(browser: HeadlessChromium, path: Path, width: int | None = None) -> dict[str, Any]:
    page = browser.load(path, READ_FLAME, width=width)
    assert page.problems() == [], f"{path.name}:\n" + "\n".join(page.problems())
    assert isinstance(page.value, dict)
    return page.value


def has_machinery(text: str) -> bool:
    return any(m in text for m in MACHINERY)


# --- the terminal ---------------------------------------------------------------------


def test_the_cli_hides_import_machinery_by_default(program: Program) -> None:
    shown = ok(memtape("top", program.capture, "--by", "traceback", "--limit", "200"))
    # The program does import through the machinery: shown, its frames are there.
    shown_all = ok(
        memtape("top", program.capture, "--by", "traceback", "--limit", "200", "--imports", "show")
    )
    assert has_machinery(shown_all.stdout), shown_all.stdout
    for args in (("stats",), ("top", "--limit", "200"), ("top", "--by", "traceback")):
        out = ok(memtape(*args, program.capture)).stdout
        assert not has_machinery(out), (args, out)
    # The module's own allocation stays on its line, called from the importing line.
    lines = shown.stdout.splitlines()
    at = [i for i, line in enumerate(lines) if line.endswith(program.table())]
    assert at, shown.stdout
    assert lines[at[0] + 1].strip() == f"called from {program.importing()}", shown.stdout
    # What the machinery allocated (the compiled tuple) is the importing line's.
    top = read_json("top", program.capture, "--limit", "200")
    mine = [s for s in top["sites"] if s["frames"][0]["filename"] == str(program.main)]
    importing = [s for s in mine if s["frames"][0]["line"] == program.import_line]
    assert importing and importing[0]["bytes"] >= 2_000 * 8, top


def test_fold_sums_the_import_in_one_frame_at_the_importing_line(program: Program) -> None:
    out = ok(memtape("top", program.capture, "--imports", "fold")).stdout
    first = out.splitlines()[1]
    assert first.endswith(f"{program.main}:{program.import_line} in [import helper_mod]"), out
    data = read_json("top", program.capture, "--imports", "fold")
    site = data["sites"][0]
    # The module's 8 MiB table and the compiled tuple, together.
    assert site["bytes"] >= 8 * MiB + 2_000 * 8, site
    assert not has_machinery(out)


def test_run_summary_takes_imports(program: Program) -> None:
    capture = program.root / "run-summary.mtape"
    default = memtape("run", "-o", capture, "--force", program.main, cwd=program.root)
    assert default.returncode == 0, describe(default)
    assert not has_machinery(default.stderr), default.stderr
    assert f"{program.main}:{program.import_line} in <module>" in default.stderr
    folded = memtape(
        "run", "-o", capture, "--force", "--imports", "fold", program.main, cwd=program.root
    )
    assert "in [import helper_mod]" in folded.stderr, describe(folded)
    bad = memtape("run", "--imports", "sometimes", program.main, cwd=program.root)
    assert bad.returncode == 2 and "--imports" in bad.stderr, describe(bad)


def test_bad_imports_mode_is_a_usage_error(program: Program) -> None:
    for command in ("stats", "top", "diff", "flamegraph", "report"):
        result = memtape(command, program.capture, "--imports", "never")
        assert result.returncode == 2, describe(result)
        assert "invalid choice: 'never'" in result.stderr, describe(result)


# --- one number format ----------------------------------------------------------------

# What the one format rules out, each with why.
FORBIDDEN = {
    # (a size such as "+1020.0 KiB" is not a count: its decimals say so)
    "a signed count without separators": re.compile(r"(?<![\w.])[+-]\d{4,}(?![\d.])"),
    "bytes over 1 KiB not in KiB/MiB/...": re.compile(r"\b(?:\d{1,3}(?:,\d{3})+|\d{5,}) B\b"),
    "a zero in a unit for a non-zero size": re.compile(r"\b0\.0 [KMGTPE]iB\b"),
    "'of blocks'": re.compile(r"\bof blocks\b"),
    "a count of 10,000 or more without separators": re.compile(r"(?<![\w.:/=+-])\d{5,}(?![\w.:/])"),
}


def forbidden_forms(text: str) -> list[str]:
    found = []
    for line in text.splitlines():
        if line.startswith(("PID:", "Python:", "Command line:", "Capture:")):
            continue
        found.extend(f"{why}: {line!r}" for why, rx in FORBIDDEN.items() if rx.search(line))
    return found


def test_terminal_outputs_use_one_number_format(program: Program, tmp_path: Path) -> None:
    tiny = write_program(tmp_path / "tiny.py", "x = 1\n")
    run = memtape("run", "-o", tmp_path / "tiny.mtape", tiny, cwd=tmp_path)
    assert run.returncode == 0, describe(run)
    outputs = {
        "run": run.stderr,
        "stats": ok(memtape("stats", program.capture)).stdout,
        "top": ok(memtape("top", program.capture, "--by", "traceback")).stdout,
        "diff": ok(memtape("diff", program.capture, "--from", "start", "--to", "end")).stdout,
    }
    # The diff has a count change in the thousands (5,000 small bytearrays), grouped.
    assert re.search(r"\+\d{1,3}(,\d{3})+\s", outputs["diff"]), outputs["diff"]
    problems = [f"{name}: {p}" for name, text in outputs.items() for p in forbidden_forms(text)]
    assert problems == [], "\n".join(problems) + "\n\n" + "\n".join(outputs.values())


def test_the_forbidden_forms_are_recognized() -> None:
    for bad in ("Count diff +115479 here", "+8,456,986 B", "(0.0 MiB)", "4,714 of blocks",
                "allocated 237746 blocks"):  # fmt: skip
        assert forbidden_forms(bad), bad
    for good in ("+115,479", "+8.1 MiB", "1023 B", "main.py:12345 in f", "1.500 s",
                 "237,746 blocks", "-12 B"):  # fmt: skip
        assert forbidden_forms(good) == [], good


# --- the pictures in Chromium ---------------------------------------------------------


def test_flamegraph_labels_are_short_and_hover_shows_the_path(
    browser: HeadlessChromium, program: Program
) -> None:
    page = read_flame(browser, program.page("flamegraph"))
    frames = page["frames"]
    assert frames, "no frames drawn"
    for f in frames:
        assert "/" not in f["text"] and "\\" not in f["text"], f["text"]
    table = [f for f in frames if f["text"] == f"<module>  helper_mod.py:{program.table_line}"]
    assert table, [f["text"] for f in frames]
    # The tooltip has the whole path.
    assert f"{program.helper}:{program.table_line}" in table[0]["tip"], table[0]["tip"]


def test_flamegraph_hides_imports_by_default(browser: HeadlessChromium, program: Program) -> None:
    page = read_flame(browser, program.page("flamegraph"))
    assert not has_machinery(page["data"]), "import machinery in the page's data"
    assert page["importMode"] == {"mode": "hide"}  # and the page says so
    frames = page["frames"]
    assert not [f for f in frames if has_machinery(f["text"])]
    importing = [f for f in frames if f["text"] == f"<module>  main.py:{program.import_line}"]
    table = [f for f in frames if f["text"] == f"<module>  helper_mod.py:{program.table_line}"]
    assert importing and table, [f["text"] for f in frames]
    # Right under the importing line (one row down, within its width).
    assert table[0]["top"] - importing[0]["top"] == pytest.approx(18, abs=1)
    assert importing[0]["left"] - 1 <= table[0]["left"] <= table[0]["right"]
    assert table[0]["right"] <= importing[0]["right"] + 1
    assert table[0]["bytes"] >= 8 * MiB


def test_flamegraph_fold_and_show(browser: HeadlessChromium, program: Program) -> None:
    folded = read_flame(browser, program.page("flamegraph", "--imports", "fold"))
    imports = [f for f in folded["frames"] if f["text"].startswith("[import")]
    assert [f["text"] for f in imports] == [
        f"[import helper_mod]  main.py:{program.import_line}"
    ], [f["text"] for f in folded["frames"]]
    assert imports[0]["bytes"] >= 8 * MiB + 2_000 * 8
    assert not has_machinery(folded["data"]) and folded["importMode"] == {"mode": "fold"}
    shown = read_flame(browser, program.page("flamegraph", "--imports", "show"))
    assert [f for f in shown["frames"] if "<frozen importlib._bootstrap>" in f["text"]], [
        f["text"] for f in shown["frames"]
    ]


@pytest.mark.parametrize("width", [900, 1600, 2400])
def test_report_timeline_spans_the_page(
    browser: HeadlessChromium, program: Program, width: int
) -> None:
    page = read_flame(browser, program.page("report"), width=width)
    assert page["windowWidth"] == width
    assert page["chartWidth"] == pytest.approx(page["contentWidth"], abs=3), page


def test_report_hides_imports_by_default_and_says_so(
    browser: HeadlessChromium, program: Program
) -> None:
    page = read_flame(browser, program.page("report"))
    assert not has_machinery(page["data"]), "import machinery in the report's data"
    assert page["importMode"] == {"mode": "hide"}
    assert not [f for f in page["frames"] if "/" in f["text"]]
    shown = read_flame(browser, program.page("report", "--imports", "show"))
    assert has_machinery(shown["data"]) and shown["importMode"] == {"mode": "show"}
    window = json.loads(
        re.search(
            r'<script type="application/json" id="window-data">(.*?)</script>',
            program.page("report", "--imports", "fold").read_text(encoding="utf-8"),
            re.S,
        ).group(1)  # type: ignore[union-attr]
    )
    assert "[import helper_mod]" in window["strings"]
