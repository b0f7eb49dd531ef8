"""What a ``%%memtape`` cell's results show, in a real notebook executed by nbclient on a
stock ipykernel: the cell's own code only (no memtape, IPython or kernel frame, nothing
they allocate counted), and an inline report that shows whole in headless Chromium,
however tall it is and however it grows, also where the front end runs the output's
scripts after inserting it."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import nbformat
import pytest
from headless_chromium import HeadlessChromium
from memtape_cli import PACKAGE_DIR, memtape, ok
from nbclient import NotebookClient

MiB = 2**20

CELLS = [
    ("load", "%load_ext memtape"),
    (
        "define",
        "def make_rows(n):\n"
        "    rows = []\n"
        "    for _ in range(n):\n"
        "        rows.append(bytearray(100))\n"
        "    return rows",
    ),
    ("record", "%%memtape --save {record}\nrows = make_rows(20_000)\nlen(rows)"),
    ("raises", "%%memtape --save {raises}\nraise ValueError('only raises')"),
    # A thread running before the cell (as the kernel's own threads do), allocating all
    # along; the cell starts a thread of its own.
    (
        "background",
        "import collections, threading, time\n"
        "stop_churn = threading.Event()\n"
        "def churn():\n"
        "    kept = collections.deque(maxlen=50)\n"
        "    while not stop_churn.is_set():\n"
        "        kept.append(bytearray(1000))\n"
        "        time.sleep(0.001)\n"
        "churning = threading.Thread(target=churn, daemon=True)\n"
        "churning.start()",
    ),
    (
        "threads",
        "%%memtape --save {threads}\n"
        "def work():\n"
        "    global from_thread\n"
        "    from_thread = bytearray(1 << 20)\n"
        "worker = threading.Thread(target=work)\n"
        "worker.start()\n"
        "worker.join()\n"
        "time.sleep(0.2)",
    ),
    ("stop-churn", "stop_churn.set()\nchurning.join()"),
]

# Files whose frames are the kernel's or memtape's, never the cell's.
NOT_THE_CELLS = (str(PACKAGE_DIR), "IPython/", "ipykernel/", "tornado/", "asyncio/", "runpy")


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("notebook_results")
    saved = {key: root / f"{key}.mtape" for key in ("record", "raises", "threads")}
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [nbformat.v4.new_code_cell(src.format(**saved)) for _, src in CELLS]
    client = NotebookClient(
        nb,
        timeout=120,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(root)}},
    )
    client.execute()
    cells = dict(zip([key for key, _ in CELLS], nb.cells, strict=True))
    return {"cells": cells, "saved": saved, "root": root}


def report(ran: dict[str, Any], key: str) -> Any:
    (shown,) = [o for o in ran["cells"][key].outputs if o.output_type == "display_data"]
    return shown.data


def traceback_sites(capture: Path) -> list[list[dict[str, Any]]]:
    """Every stack ``top --by traceback`` shows, at the peak and at the end."""
    stacks = []
    for at in ("peak", "end"):
        shown = ok(memtape("top", capture, "--json", "--by", "traceback", "--at", at)).stdout
        stacks += [site["frames"] for site in json.loads(shown)["sites"]]
    return stacks


@pytest.mark.parametrize("key", ["record", "raises", "threads"])
def test_cell_results_show_the_cells_code_only(ran: dict[str, Any], key: str) -> None:
    label = f"Cell In[{ran['cells'][key].execution_count}]"
    text = report(ran, key)["text/plain"]
    page = report(ran, key)["text/html"]
    for theirs in (*NOT_THE_CELLS, "run_cell_code", "cell_code.py"):
        assert theirs not in text, (theirs, text)
        assert theirs not in page, theirs
    for stack in traceback_sites(ran["saved"][key]):
        # Outermost frame last: the cell's own line (a function it calls lies above it),
        # or, in a thread the cell started, where Python's traceback of it starts.
        outermost = stack[-1]
        in_cell = outermost["filename"] == label and outermost["function"] == "<module>"
        in_thread = outermost["filename"] == threading.__file__
        assert in_cell or in_thread, stack
        for frame in stack:
            assert not any(n in frame["filename"] for n in NOT_THE_CELLS), stack


def test_a_cell_that_only_raises_allocates_next_to_nothing(ran: dict[str, Any]) -> None:
    """Its exception and traceback (its own line's) are all it makes: no site of memtape's
    runner, which used to be the biggest one."""
    shown = json.loads(ok(memtape("stats", ran["saved"]["raises"], "--json")).stdout)
    assert shown["peak"]["bytes"] < 2048, shown["peak"]
    files = {frame["filename"] for site in shown["top"] for frame in site["frames"]}
    assert len(files) <= 1 and all(f.startswith("Cell In[") for f in files), shown["top"]


def test_the_record_cells_sites_are_its_rows(ran: dict[str, Any]) -> None:
    top = json.loads(ok(memtape("top", ran["saved"]["record"], "--json", "--limit", "1")).stdout)
    (site,) = top["sites"]
    assert site["frames"][0]["function"] == "make_rows", site
    assert site["bytes"] >= 20_000 * 100, site


def test_threads_running_before_the_cell_are_not_the_cells(ran: dict[str, Any]) -> None:
    """The kernel's threads (here one like them, allocating all along) are left out; a
    thread the cell starts is the cell's."""
    capture = ran["saved"]["threads"]
    functions = {frame["function"] for stack in traceback_sites(capture) for frame in stack}
    assert "work" in functions and "churn" not in functions, functions
    shown = json.loads(ok(memtape("stats", capture, "--json")).stdout)
    assert 1 << 20 <= shown["end"]["bytes"] < (1 << 20) + 64 * 1024, shown["end"]


@pytest.mark.parametrize("key", ["record", "raises"])
def test_a_cells_rss_is_the_cells_not_the_kernels(ran: dict[str, Any], key: str) -> None:
    """The kernel's memory before the cell is its start, not memory memtape did not see."""
    rss = json.loads(ok(memtape("stats", ran["saved"][key], "--json")).stdout)["rss"]
    assert rss["at_start"]["rss"] > 30 * MiB, rss  # the kernel, running already
    assert rss["untracked_bytes"] == rss["not_seen_bytes"] < 2 * MiB, rss
    assert rss["added_bytes"] < 16 * MiB, rss
    text = report(ran, key)["text/plain"]
    assert re.search(r"^\s*not seen:\s+none", text, re.M), text
    assert "more than the recorded peak" not in text, text


# --- the inline report, whole, in headless Chromium ---------------------------------------

# Waits until the frame's height has not changed for 600 ms; then how much of the page
# inside it shows: its whole height, the room it has, a horizontal scrollbar's height.
MEASURE = r"""
function settled(frame) {
  return new Promise((done) => {
    let last = -1, since = Date.now();
    const start = Date.now();
    (function wait() {
      const h = frame.clientHeight;
      if (h !== last) { last = h; since = Date.now(); }
      if (Date.now() - since > 600 || Date.now() - start > 15000) done(h);
      else setTimeout(wait, 50);
    })();
  });
}
function measure(frame) {
  const root = frame.contentDocument.documentElement;
  return {frame: frame.clientHeight, scroll: root.scrollHeight, room: root.clientHeight,
          hbar: frame.contentWindow.innerHeight - root.clientHeight};
}
"""

READ_WHOLE = (
    MEASURE
    + r"""
(async () => {
  const sleep = () => new Promise((r) => setTimeout(r, 50));
  while (window.outputScriptsRan === false || !document.querySelector("iframe.memtape-report")) {
    await sleep();
  }
  const frame = document.querySelector("iframe.memtape-report");
  await settled(frame);
  const loaded = measure(frame);
  // The report grows after load: every details row opened.
  const opened = [...frame.contentDocument.querySelectorAll("details")];
  opened.forEach((d) => { d.open = true; });
  await settled(frame);
  return {loaded, grown: measure(frame), opened: opened.length};
})()
"""
)

# A front end inserts an output's HTML (its scripts do not run so), and runs the scripts
# afterwards: here once the report's page has loaded and posted its height.
LATE_SCRIPTS = r"""
<div id="output"></div>
<script>
window.outputScriptsRan = false;
const output = document.getElementById("output");
output.innerHTML = JSON.parse(document.getElementById("html").textContent);
output.querySelector("iframe").addEventListener("load", () => setTimeout(() => {
  for (const old of output.querySelectorAll("script")) {
    const script = document.createElement("script");
    script.textContent = old.textContent;
    old.replaceWith(script);
  }
  window.outputScriptsRan = true;
}, 1000));
</script>
"""


def notebook_page(path: Path, output_html: str, late_scripts: bool) -> Path:
    """A page holding the output as a notebook front end would. The frame may be read by
    the test (same origin): its scripts run as in the output, the messages it exchanges
    do not depend on its origin."""
    readable = output_html.replace(
        'sandbox="allow-scripts"', 'sandbox="allow-scripts allow-same-origin"'
    )
    assert readable != output_html
    if late_scripts:
        holder = json.dumps(readable).replace("</", "<\\/")
        body = f'<script type="application/json" id="html">{holder}</script>{LATE_SCRIPTS}'
    else:
        body = readable
    path.write_text(
        f"<!DOCTYPE html><html><body><p>a notebook</p>{body}</body></html>", encoding="utf-8"
    )
    return path


@pytest.mark.parametrize("late_scripts", [False, True], ids=["scripts-in-order", "scripts-late"])
def test_inline_report_shows_whole_at_any_height(
    ran: dict[str, Any], browser: HeadlessChromium, tmp_path: Path, late_scripts: bool
) -> None:
    output = report(ran, "record")["text/html"]
    page = notebook_page(tmp_path / "notebook.html", output, late_scripts)
    visit = browser.load(page, READ_WHOLE)
    assert visit.problems() == [], visit.problems()
    loaded, grown = visit.value["loaded"], visit.value["grown"]
    assert visit.value["opened"] > 0, visit.value
    for seen in (loaded, grown):
        # Nothing clipped: the page's whole height fits the room the frame gives it.
        assert seen["scroll"] <= seen["room"], visit.value
        assert seen["frame"] == seen["room"] + seen["hbar"], visit.value
    assert loaded["scroll"] > 640, visit.value  # taller than the frame's first height
    assert grown["scroll"] > loaded["scroll"], visit.value  # it grew, and still fits
