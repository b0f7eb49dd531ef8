"""``memtape run --follow-children``: every child Python records its own capture beside
the parent's, and the reports read the set (issue 9, item 3).

One program per start method (fork, forkserver, spawn) starts a ``Pool`` worker, a
``Process`` and a ``ProcessPoolExecutor`` worker of that method, then two ``subprocess``
children running python at once (one with ``-I``); one more ``Process`` is ended by
``terminate()`` (SIGTERM) while it holds its block. Each child allocates a size of its
own on a line of its own; the two subprocess children hold theirs at the same time, so
the combined peak must count both, while the pool, process and executor children come
and go one after another.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from child_python import describe
from headless_chromium import HeadlessChromium
from memtape_cli import Site, memtape, ok, read_json, sites, within, write_program
from source_lines import line_of

MiB = 2**20
POOL, PROCESS, EXECUTOR, SUBPROCESS = 3_100_000, 4_200_000, 5_300_000, 12_400_000
TERMINATED = 6_400_000

PROGRAM = f"""
import multiprocessing as mp
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor


def pool_task(n):
    block = bytearray(n)  # @tm:pool
    return len(block)


def process_task(n):
    block = bytearray(n)  # @tm:process
    return len(block)


def executor_task(n):
    block = bytearray(n)  # @tm:executor
    return len(block)


def terminated_task(n, ready):
    block = bytearray(n)  # @tm:terminated
    ready.set()
    time.sleep(60)


if __name__ == "__main__":
    ctx = mp.get_context(sys.argv[1])
    with ctx.Pool(1) as pool:  # leaving the block SIGTERMs the worker
        assert pool.map(pool_task, [{POOL}]) == [{POOL}]
    p = ctx.Process(target=process_task, args=({PROCESS},))
    p.start()
    p.join()
    assert p.exitcode == 0
    with ProcessPoolExecutor(1, mp_context=ctx) as ex:
        assert ex.submit(executor_task, {EXECUTOR}).result() == {EXECUTOR}
    ready = ctx.Event()
    p = ctx.Process(target=terminated_task, args=({TERMINATED}, ready))
    p.start()
    assert ready.wait(60)
    p.terminate()
    p.join()
    assert p.exitcode == -15, p.exitcode
    child = sys.argv[2]
    both = [subprocess.Popen([sys.executable, child]),
            subprocess.Popen([sys.executable, "-I", child])]
    assert [c.wait() for c in both] == [0, 0]
    print("done")
"""

CHILD = f"""
import time
block = bytearray({SUBPROCESS})  # @tm:subprocess
time.sleep(0.5)
"""

# The sizes each kind of child holds, by its start method in the capture's metadata.
WORKER_TAGS = {
    "pool": POOL,
    "process": PROCESS,
    "executor": EXECUTOR,
    "terminated": TERMINATED,
}


class Run:
    """One followed run of PROGRAM with one start method."""

    def __init__(self, root: Path, method: str) -> None:
        self.method = method
        self.script = write_program(root / "prog.py", PROGRAM)
        self.child = write_program(root / "child.py", CHILD)
        self.capture = root / "out.mtape"
        result = memtape(
            "run", "-q", "--follow-children", "-o", self.capture, self.script, method,
            self.child, timeout=120,
        )  # fmt: skip
        assert result.returncode == 0 and "done" in result.stdout, describe(result)
        assert "memtape:" not in result.stderr, describe(result)
        self.stats = read_json("stats", self.capture)
        self._tops: dict[int, list[Site]] = {}

    def processes(self) -> list[dict[str, Any]]:
        return list(self.stats["processes"])

    def children(self, *methods: str) -> list[dict[str, Any]]:
        return [p for p in self.processes() if p["start_method"] in methods]

    def top(self, pid: int) -> list[Site]:
        if pid not in self._tops:
            rows = read_json("top", self.capture, "--pid", str(pid), "--limit", "3")["sites"]
            self._tops[pid] = sites(rows)
        return self._tops[pid]


_RUNS: dict[str, Run] = {}


def run_of(method: str, factory: pytest.TempPathFactory) -> Run:
    """The run with ``method``, made once per test session."""
    if method not in _RUNS:
        _RUNS[method] = Run(factory.mktemp(method), method)
    return _RUNS[method]


@pytest.fixture(params=["fork", "forkserver", "spawn"])
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_of(request.param, tmp_path_factory)


def holder(run: Run, tag: str, size: int) -> dict[str, Any]:
    """The one process whose top site is the line tagged ``tag``, holding ``size``."""
    script = run.child if tag == "subprocess" else run.script
    line = line_of(script, tag)
    found = []
    for p in run.processes():
        top = run.top(p["pid"])
        if top and top[0].at(script, line):
            assert within(top[0].bytes, size), (tag, top[0])
            found.append(p)
    assert found, f"no capture holds {tag} at {script}:{line}"
    return found[0]


def test_each_child_has_its_own_capture_beside_the_parent(run: Run) -> None:
    root = run.processes()[0]
    assert root["start_method"] == "root" and root["parent_pid"] is None
    worker_method = "forkserver" if run.method == "forkserver" else run.method
    workers = run.children(worker_method)
    assert len(workers) >= 4, run.processes()  # pool, process, executor, terminated
    subprocesses = run.children("subprocess")
    assert len(subprocesses) == 2, run.processes()
    for p in run.processes()[1:]:
        assert p["path"] == f"{str(run.capture)[: -len('.mtape')]}.{p['pid']}.mtape"
        assert Path(p["path"]).is_file()
        assert not p["run"]["cut_short"], p
    if run.method == "forkserver":
        servers = run.children("forkserver-server")
        assert len(servers) == 1
        assert all(w["parent_pid"] == servers[0]["pid"] for w in workers)
    else:
        assert all(w["parent_pid"] == root["pid"] for w in workers)


def test_each_child_attributes_its_line_and_size(run: Run) -> None:
    for tag, size in {**WORKER_TAGS, "subprocess": SUBPROCESS}.items():
        holder(run, tag, size)
    # The worker multiprocessing ended with SIGTERM: complete, and says so.
    terminated = holder(run, "terminated", TERMINATED)
    assert terminated["run"]["exit"] == "signal" and terminated["run"]["exit_code"] == 143
    assert not terminated["run"]["cut_short"]


def test_combined_peak_is_the_highest_sum_at_one_moment(run: Run) -> None:
    combined = run.stats["combined"]
    assert combined["processes"] == len(run.processes())
    peak = combined["peak"]
    # The two subprocess children hold their blocks at the same time.
    assert peak["bytes"] >= 2 * SUBPROCESS, peak
    both = {p["pid"] for p in run.children("subprocess")}
    assert both <= {int(pid) for pid in peak["by_pid"]}, peak
    assert sum(peak["by_pid"].values()) == peak["bytes"]
    # Not the sum of the peaks: the workers came and went before.
    workers = POOL + PROCESS + EXECUTOR + TERMINATED
    assert combined["sum_of_peaks"] >= 2 * SUBPROCESS + workers
    assert peak["bytes"] < combined["sum_of_peaks"] - workers // 2
    # Totals add every process.
    allocated = sum(p["totals"]["bytes_allocated"] for p in run.processes())
    assert combined["totals"]["bytes_allocated"] == allocated >= 2 * SUBPROCESS + workers
    # The top site at the combined peak is the subprocess line, from both children.
    top = combined["top"][0]
    assert top["frames"][0]["line"] == line_of(run.child, "subprocess")
    assert within(top["bytes"], 2 * SUBPROCESS) and set(map(int, top["by_pid"])) == both


def test_pid_selects_one_process(run: Run) -> None:
    pool = holder(run, "pool", POOL)
    one = read_json("stats", run.capture, "--pid", str(pool["pid"]))
    assert "combined" not in one and one["run"]["pid"] == pool["pid"]
    assert one["peak"] == pool["peak"] and one["peak"]["bytes"] >= POOL
    missing = memtape("stats", run.capture, "--pid", "1")
    assert missing.returncode == 2 and "no process 1" in missing.stderr


def test_other_reports_read_the_set(run: Run, tmp_path: Path) -> None:
    line = line_of(run.child, "subprocess")
    top = read_json("top", run.capture)
    assert top["processes"] == [p["pid"] for p in run.processes()]
    assert top["sites"][0]["frames"][0]["line"] == line
    folded = tmp_path / "all.folded"
    ok(memtape("flamegraph", run.capture, "--folded", "-o", folded))
    heads = {text.split(";", 1)[0] for text in folded.read_text().splitlines()}
    for p in run.children("subprocess"):
        assert f"pid {p['pid']} (subprocess)" in heads, heads
    exported = tmp_path / "all.json"
    ok(memtape("export", run.capture, "--format", "json", "-o", exported))
    combined = json.loads(exported.read_text())["combined"]
    for key in ("processes", "peak", "sum_of_peaks", "totals"):
        assert combined[key] == run.stats["combined"][key], key
    assert combined["top"][:10] == run.stats["combined"]["top"]


def test_a_child_that_cannot_record_runs_on(tmp_path: Path) -> None:
    plan = {"stem": str(tmp_path / "missing" / "out"), "run_id": "x", "root_pid": 1,
            "nframe": 16, "min_size": 0, "native_heap": True}  # fmt: skip
    env = {**os.environ, "MEMTAPE_FOLLOW_CHILDREN": json.dumps(plan)}
    result = subprocess.run(
        [sys.executable, "-c", "print(sum(range(10)))"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0 and result.stdout == "45\n", describe(result)
    assert "not recording child process" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


# Read in the set's page: the selector, the combined view, then one process's report.
READ_SET_PAGE = r"""
(async () => {
  const wait = (ms) => new Promise((r) => setTimeout(r, ms));
  const rows = (doc, table) => [...doc.querySelectorAll(table + " tr.site")].map((tr) => ({
    bytes: Number(tr.dataset.bytes),
    loc: (tr.querySelector("summary.loc") || tr.querySelector(".loc") || tr).textContent }));
  const out = {};
  const select = document.getElementById("process-select");
  out.options = [...select.options].map((o) => o.value);
  out.combinedShown = !document.getElementById("combined-view").hidden;
  out.peak = Number(document.getElementById("combined-peak").dataset.bytes);
  out.sites = rows(document, "#combined-sites");
  out.lines = document.querySelectorAll("#combined-chart polyline.proc-line").length;
  const flame = document.getElementById("combined-flamegraph");
  for (let i = 0; i < 50 && !flame.contentDocument.querySelector(".fg-frame"); i++) await wait(50);
  out.flameProcesses = [...flame.contentDocument.querySelectorAll(".fg-frame")]
    .map((e) => e.textContent).filter((t) => t.startsWith("pid "));
  out.picked = {};
  for (const pid of out.options.slice(1)) {
    const frame = document.getElementById("process-report");
    const loaded = new Promise((r) => frame.addEventListener("load", r, { once: true }));
    select.value = pid;
    select.dispatchEvent(new Event("change"));
    await loaded;
    out.picked[pid] = {
      combinedShown: !document.getElementById("combined-view").hidden,
      hash: location.hash,
      top: rows(frame.contentDocument, "#top-sites").slice(0, 1),
    };
  }
  return out;
})()
"""


def test_html_report_has_a_process_selector(
    tmp_path_factory: pytest.TempPathFactory,
    tmp_path: Path,
    browser: HeadlessChromium,
) -> None:
    run = run_of("spawn", tmp_path_factory)
    page_path = tmp_path / "report.html"
    ok(memtape("report", run.capture, "-o", page_path))
    page = browser.load(page_path, READ_SET_PAGE)
    assert page.problems() == [], page.problems()
    dom = page.value
    pids = [str(p["pid"]) for p in run.processes()]
    assert dom["options"] == ["all", *pids]
    assert dom["combinedShown"] and dom["peak"] == run.stats["combined"]["peak"]["bytes"]
    assert dom["lines"] == len(pids)
    line = line_of(run.child, "subprocess")
    assert dom["sites"][0]["loc"] == f"{run.child}:{line} in <module>"
    assert within(dom["sites"][0]["bytes"], 2 * SUBPROCESS)
    for p in run.children("subprocess"):
        assert f"pid {p['pid']} (subprocess)" in dom["flameProcesses"]
    # Each process's own report, chosen in the selector, tops with its own line.
    for tag, size in WORKER_TAGS.items():
        p = holder(run, tag, size)
        picked = dom["picked"][str(p["pid"])]
        assert not picked["combinedShown"] and picked["hash"] == f"#pid={p['pid']}"
        top = picked["top"][0]
        assert top["loc"] == f"{run.script}:{line_of(run.script, tag)} in {tag}_task"
        assert within(top["bytes"], size)


def test_a_child_running_memtape_run_records_into_its_own_file(tmp_path: Path) -> None:
    inner = tmp_path / "inner.mtape"
    code = (
        "import subprocess, sys\n"
        f"subprocess.run([sys.executable, '-m', 'memtape', 'run', '-q', '-o', {str(inner)!r},"
        " '-c', 'x = bytearray(2_000_000)'], check=True)\n"
    )
    outer = tmp_path / "outer.mtape"
    ok(memtape("run", "-q", "--follow-children", "-o", outer, "-c", code))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inner.mtape", "outer.mtape"]
    top = sites(read_json("top", inner, "--limit", "1")["sites"])[0]
    assert top.filename == "<string>" and within(top.bytes, 2_000_000)
    assert "combined" not in read_json("stats", outer)
