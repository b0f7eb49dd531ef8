"""``%load_ext memtape``, ``%%memtape`` and ``%memtape_top`` in a real notebook: one
notebook, built with nbformat, executed by nbclient on a stock ipykernel started from the
interpreter running the tests, then its outputs read back (the inline report also in
headless Chromium, offline).

One kernel runs every cell (a kernel takes seconds to start); each test reads the
outputs of its own cells."""

from __future__ import annotations

import html
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import memtape._native as capture_api
import nbformat
import pytest
from headless_chromium import HeadlessChromium
from memtape_cli import memtape, ok, within
from nbclient import NotebookClient

MiB = 2**20
ANSI = re.compile(r"\x1b\[[0-9;]*m")

# 20 MiB allocated by SQLite's C code (malloc), then copied into a Python bytes object.
SQLITE_BLOB = (
    "blob = __import__('sqlite3').connect(':memory:')"
    ".execute('select zeroblob(20 * 1048576)').fetchone()"
)

# Each cell: (key, source). A source line ending in `# @tm:TAG` is found by tag.
CELLS = [
    ("load", "%load_ext memtape\nimport sys\nprint(sys.executable)"),
    ("define", "def make_block(n):\n    return bytearray(n)  # @tm:block"),
    (
        "record",
        "%%memtape\n"
        "\n"
        "block = make_block(50 * 2**20)\n"
        "rows = [0] * (4 * 2**20)  # @tm:rows\n"
        "print('printed by the cell')\n"
        "len(block)",
    ),
    ("top", "%memtape_top 3  # a comment ends the options"),
    ("persist", "print(len(block), len(rows))"),
    (
        "raises",
        "%%memtape --save {save} --no-native-heap --top 2\n"
        "kept = bytearray(30 * 2**20)  # @tm:kept\n"
        f"{SQLITE_BLOB}\n"
        "raise ValueError('boom from the cell')  # @tm:boom",
    ),
    ("after-raise", "print(len(kept))"),
    ("native", f"%%memtape --save {{native}}\n{SQLITE_BLOB}  # @tm:native"),
    (
        "nested",
        "%%memtape\nget_ipython().run_cell_magic('memtape', '', 'inner = 7')\ninner * 6",
    ),
    ("stdlib-on", "import tracemalloc\ntracemalloc.start()"),
    ("stdlib-cell", "%%memtape\ntraced = 5"),
    ("stdlib-off", "tracemalloc.stop()\nprint(traced)"),
    ("memtape-tm-on", "import memtape.tracemalloc as mtm\nmtm.start()"),
    ("memtape-tm-cell", "%%memtape\nseen = bytearray(20 * 2**20)  # @tm:seen"),
    (
        "memtape-tm-off",
        "print(mtm.is_tracing(), mtm.get_traced_memory()[0] >= 20 * 2**20)\nmtm.stop()",
    ),
    ("bad-option", "%%memtape --top zero\nnever = 1"),
    ("await", "%%memtape\nimport asyncio\nawait asyncio.sleep(0)\nnever = 2"),
    ("never", "print('never' in globals())"),
]


def line_of_tag(source: str, tag: str) -> int:
    """1-based line of the cell line marked ``# @tm:TAG``."""
    hits = [i for i, text in enumerate(source.splitlines(), 1) if text.endswith(f"# @tm:{tag}")]
    assert len(hits) == 1, (tag, source)
    return hits[0]


@dataclass
class Ran:
    """The executed notebook, by cell key."""

    cells: dict[str, Any]
    errored: set[str] = field(default_factory=set)
    save: Path = Path()
    native: Path = Path()

    def source(self, key: str) -> str:
        return str(self.cells[key].source)

    def label(self, key: str) -> str:
        return f"Cell In[{self.cells[key].execution_count}]"

    def site(self, key: str, tag: str) -> str:
        """``Cell In[N]:LINE`` of the tagged line of the cell ``key``."""
        return f"{self.label(key)}:{line_of_tag(self.source(key), tag)}"

    def outputs(self, key: str, output_type: str) -> list[Any]:
        return [o for o in self.cells[key].outputs if o.output_type == output_type]

    def stream(self, key: str, name: str) -> str:
        return "".join(o.text for o in self.outputs(key, "stream") if o.name == name)

    def report(self, key: str) -> Any:
        (shown,) = self.outputs(key, "display_data")
        return shown.data


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    root = tmp_path_factory.mktemp("notebook")
    save, native = root / "raised.mtape", root / "native.mtape"
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [nbformat.v4.new_code_cell(src.format(save=save, native=native)) for _, src in CELLS]
    keys = [key for key, _ in CELLS]
    errored: set[str] = set()

    def on_error(cell: Any, cell_index: int, execute_reply: Any) -> None:
        errored.add(keys[cell_index])

    client = NotebookClient(
        nb,
        timeout=120,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(root)}},
        on_cell_error=on_error,
    )
    client.execute()
    nbformat.write(nb, root / "executed.ipynb")
    return Ran(dict(zip(keys, nb.cells, strict=True)), errored, save, native)


def test_the_kernel_runs_the_interpreter_under_test(ran: Ran) -> None:
    assert ran.outputs("load", "error") == []
    assert ran.stream("load", "stdout") == f"{sys.executable}\n"


def test_cell_runs_in_the_kernel_with_its_output_and_result(ran: Ran) -> None:
    assert ran.outputs("record", "error") == []
    assert ran.stream("record", "stdout") == "printed by the cell\n"
    (result,) = ran.outputs("record", "execute_result")
    assert result.data["text/plain"] == str(50 * MiB)
    assert result.execution_count == ran.cells["record"].execution_count
    # The report comes before the result, after what the cell printed.
    # (ipykernel may send one print as two stream messages: its flush timer runs between.)
    every = [o.output_type for o in ran.cells["record"].outputs]
    kinds = [kind for i, kind in enumerate(every) if i == 0 or kind != every[i - 1]]
    assert kinds == ["stream", "display_data", "execute_result"], kinds
    # Variables defined in the cell persist.
    assert ran.stream("persist", "stdout") == f"{50 * MiB} {4 * MiB}\n"


def srcdoc(data: Any) -> str:
    """The report page inside the output's iframe."""
    match = re.search(r'<iframe[^>]*\bsrcdoc="([^"]*)"', data["text/html"])
    assert match, data["text/html"][:500]
    assert 'sandbox="allow-scripts"' in data["text/html"]
    return html.unescape(match.group(1))


def test_inline_report_names_the_cell_lines(ran: Ran) -> None:
    data = ran.report("record")
    page = srcdoc(data)
    block = ran.site("define", "block")
    rows = ran.site("record", "rows")
    assert f"{block} in make_block" in page
    assert f"{rows} in &lt;module&gt;" in page
    # The kernel's frames are left out, and cells are not shown by generated file names.
    for hidden in ("ipykernel_launcher", "kernelapp.py", "run_cell_magic", "<ipython-input"):
        assert hidden not in page, hidden
    assert re.search(r"/ipykernel_\d+/", page) is None
    # The text form: the summary and the top sites.
    text = data["text/plain"]
    assert text.startswith(f"memtape: {ran.label('record')}\n"), text
    assert f"{block} in make_block" in text and f"{rows} in <module>" in text


def test_memtape_top_prints_the_last_cells_sites(ran: Ran) -> None:
    text = ran.stream("top", "stdout")
    block = ran.site("define", "block")
    match = re.search(rf"([\d.]+) MiB\s+[\d.]+%\s+\d+\s+{re.escape(block)} in make_block", text)
    assert match, text
    assert within(float(match.group(1)), 50.0, 0.02)
    rows = ran.site("record", "rows")
    match = re.search(rf"([\d.]+) MiB\s+[\d.]+%\s+\d+\s+{re.escape(rows)} in <module>", text)
    assert match, text
    assert within(float(match.group(1)), 32.0, 0.02)
    assert len(re.findall(r"^\s*\d+\s+[\d.]+ (?:B|KiB|MiB)", text, re.M)) == 3, text


def test_exception_is_raised_as_usual_after_the_report(ran: Ran) -> None:
    assert "raises" in ran.errored  # nbclient saw the cell fail, as without the magic
    (error,) = ran.outputs("raises", "error")
    assert (error.ename, error.evalue) == ("ValueError", "boom from the cell")
    traceback = ANSI.sub("", "\n".join(error.traceback))
    boom = line_of_tag(ran.source("raises"), "boom")
    assert f"{ran.label('raises')}, line {boom}" in traceback, traceback
    assert "raise ValueError('boom from the cell')" in traceback
    # The report was shown first, and says the cell raised.
    note = f"memtape: {ran.label('raises')} raised ValueError; the capture covers the cell"
    data = ran.report("raises")
    assert data["text/plain"].startswith(note), data["text/plain"]
    assert html.escape(note) in data["text/html"]
    # What the cell did before raising persists.
    assert ran.stream("after-raise", "stdout") == f"{30 * MiB}\n"
    assert ran.errored == {"raises", "bad-option", "await"}


def test_saved_capture_reads_in_every_cli_report(ran: Ran) -> None:
    top = json.loads(ok(memtape("top", ran.save, "--json", "--limit", "1")).stdout)
    (site,) = top["sites"]
    kept = line_of_tag(ran.source("raises"), "kept")
    assert site["frames"][0] == {
        "filename": ran.label("raises"),
        "function": "<module>",
        "line": kept,
    }, site
    assert within(site["bytes"], 30 * MiB, 0.01)
    stats = ok(memtape("stats", ran.save)).stdout
    assert "exit: exception, status 1" in stats, stats
    meta = json.loads(capture_api.analyze_capture(str(ran.save)).metadata_json)
    assert meta["native_heap"] is False
    assert meta["command"] == "%%memtape"
    assert top["by_source"]["native"] == 0  # --no-native-heap: SQLite's malloc unseen


def test_native_memory_is_recorded_by_default(ran: Ran) -> None:
    top = json.loads(ok(memtape("top", ran.native, "--json", "--limit", "1")).stdout)
    (site,) = top["sites"]
    line = line_of_tag(ran.source("native"), "native")
    assert (site["frames"][0]["filename"], site["frames"][0]["line"]) == (ran.label("native"), line)
    # SQLite's 20 MiB blob (malloc) and its copy in a bytes object, both live at the peak.
    assert top["by_source"]["native"] >= 20 * MiB, top["by_source"]
    assert top["by_source"]["python"] >= 20 * MiB, top["by_source"]


def test_nested_and_tracemalloc_cells_run_unrecorded_and_say_why(ran: Ran) -> None:
    nested = ran.stream("nested", "stderr")
    assert f"memtape: not recording {ran.label('nested')}: a capture is already" in nested
    (result,) = ran.outputs("nested", "execute_result")
    assert result.data["text/plain"] == "42"
    assert len(ran.outputs("nested", "display_data")) == 1  # the outer cell's report
    stdlib = ran.stream("stdlib-cell", "stderr")
    assert "not recording" in stdlib and "tracemalloc is tracing" in stdlib, stdlib
    assert ran.outputs("stdlib-cell", "display_data") == []
    assert ran.stream("stdlib-off", "stdout") == "5\n"


def test_memtape_tracemalloc_tracing_and_a_cell_record_together(ran: Ran) -> None:
    # memtape.tracemalloc is memtape's own recorder: the cell is recorded, and the trace
    # the user started goes on and sees the cell's allocation too.
    text = ran.report("memtape-tm-cell")["text/plain"]
    assert f"{ran.site('memtape-tm-cell', 'seen')} in <module>" in text, text
    assert ran.stream("memtape-tm-off", "stdout") == "True True\n"


def test_bad_option_is_a_usage_error_and_the_cell_does_not_run(ran: Ran) -> None:
    assert "bad-option" in ran.errored
    text = ran.stream("bad-option", "stderr")
    assert text.startswith("UsageError: %%memtape: argument --top: not a whole number"), text
    assert "usage: %%memtape [--no-native-heap] [--top N] [--save PATH]" in text
    assert ran.outputs("bad-option", "display_data") == []
    # Top-level await: refused before anything runs (the magic runs the cell synchronously).
    assert "await" in ran.errored
    text = ran.stream("await", "stderr")
    assert text.startswith("UsageError: %%memtape cannot run a cell with top-level await"), text
    assert ran.stream("never", "stdout") == "False\n"


# --- the inline report in headless Chromium ----------------------------------------------

READ_REPORT = r"""
(() => ({
  sites: [...document.querySelectorAll("#top-sites tr.site")].map((tr) => ({
    loc: (tr.querySelector("summary.loc") || tr).textContent, bytes: Number(tr.dataset.bytes) })),
  frames: [...document.querySelectorAll("#flamegraph .fg-frame")].map((e) => e.textContent),
  chart: !!document.querySelector("#memory-chart polyline"),
}))()
"""

# The notebook page holding the output: the frame's scripts ran (sandboxed) when it was
# resized to the height its page posted.
READ_FRAME = r"""
new Promise((done) => {
  const frame = document.querySelector("iframe.memtape-report");
  const start = Date.now();
  (function wait() {
    if (frame.style.height !== "640px" || Date.now() - start > 5000) {
      done({height: parseFloat(frame.style.height), sandbox: frame.getAttribute("sandbox")});
    } else setTimeout(wait, 50);
  })();
})
"""


def test_inline_report_shows_offline_without_errors(
    ran: Ran, browser: HeadlessChromium, tmp_path: Path
) -> None:
    data = ran.report("record")
    page = tmp_path / "report.html"
    page.write_text(srcdoc(data), encoding="utf-8")
    visit = browser.load(page, READ_REPORT)
    assert visit.problems() == [], visit.problems()
    block = ran.site("define", "block")
    sites = visit.value["sites"]
    assert sites[0]["loc"] == f"{block} in make_block", sites[:3]
    assert within(sites[0]["bytes"], 50 * MiB, 0.01)
    # Flame-graph labels read "function  file:line" (a cell's name has no directory).
    assert f"make_block  {block}" in visit.value["frames"], visit.value["frames"][:10]
    assert visit.value["chart"]

    notebook = tmp_path / "notebook.html"
    notebook.write_text(
        f"<!DOCTYPE html><html><body><p>a notebook</p>{data['text/html']}</body></html>",
        encoding="utf-8",
    )
    visit = browser.load(notebook, READ_FRAME)
    assert visit.problems() == [], visit.problems()
    assert visit.value["sandbox"] == "allow-scripts"
    assert visit.value["height"] > 640, visit.value  # the whole report, however tall
