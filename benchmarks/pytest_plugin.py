"""Times test suites run with plain ``pytest``, ``pytest --memray`` (pytest-memray) and
``pytest --memtape`` side by side: what a user pays for per-test memory numbers.

Two suites: more-itertools' own (its sdist, which holds the tests, is downloaded from
PyPI with pip once into ``--work`` and unpacked there; the tests then run offline), and a
generated one of many tiny tests (5,000 by default, three lines each: the per-test cost
alone). Each run is a fresh ``python -m pytest -q -p no:cacheprovider`` (start-up and
imports included, as a user pays them); runs are interleaved round-robin, mode after mode,
so that the machine's load falls on all of them alike. Each mode's median and best wall
time and its median CPU time are printed, with the ratios of its median to plain
pytest's and to pytest-memray's. ``--peer-runs K`` runs pytest-memray (the peer, shown
beside memtape, not a target) in the first K of those rounds only: the tiny suite takes
it about nine times as long as plain pytest.

    python3 benchmarks/pytest_plugin.py --python .venv-3.11/bin/python           # 3 runs
    python3 benchmarks/pytest_plugin.py --runs 1 --suites tiny --tiny-tests 500
    python3 benchmarks/pytest_plugin.py --quick     # one run, small: checks that it works

``--quick`` runs each suite small (150 tiny tests; more-itertools' ``test_recipes.py``
only), once: its numbers mean nothing.

The interpreter measured needs pytest, pytest-memray and memtape (``scripts/venv.sh``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tarfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = "more-itertools"
VERSION = "11.2.1"
# Tracer switches and allocator settings that would change what a run measures.
CLEARED_ENV = ("PYTHONTRACEMALLOC", "MEMTAPE_TRACEMALLOC", "PYTHONMALLOC", "PYTHONDEVMODE")
MODES = {"plain": (), "memray": ("--memray",), "memtape": ("--memtape",)}
SUITES = ("more-itertools", "tiny")
SUMMARY = re.compile(r"(\d+) passed")
# Seconds between two readings of a run's threads (ThreadCpu).
THREAD_READ_EVERY = 0.1
TINY_FILE_TESTS = 100


@dataclass
class Mode:
    """One way of running a suite, and its measured runs."""

    name: str
    args: tuple[str, ...]
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    passed: set[int] = field(default_factory=set)
    # Per run: CPU seconds by thread role (ThreadCpu.by_role).
    threads: list[dict[str, float]] = field(default_factory=list)


@dataclass
class Suite:
    """A directory to run pytest in, and what to run there."""

    name: str
    cwd: Path
    targets: tuple[str, ...]


def fetch_more_itertools(python: str, work: Path, quick: bool = False) -> Suite:
    """more-itertools' unpacked sdist (downloaded and unpacked once); ``quick``: one of
    its test files."""
    source = work / f"more_itertools-{VERSION}"
    if not (source / "tests").is_dir():
        work.mkdir(parents=True, exist_ok=True)
        sdist = work / f"more_itertools-{VERSION}.tar.gz"
        if not sdist.exists():
            pip = [python, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:"]
            subprocess.run([*pip, f"{PROJECT}=={VERSION}", "-d", str(work)], check=True)
        with tarfile.open(sdist) as archive:
            archive.extractall(work, filter="data")
    return Suite("more-itertools", source, ("tests/test_recipes.py",) if quick else ("tests",))


def write_tiny_suite(work: Path, tests: int) -> Suite:
    """``tests`` tests of three lines each, 100 to a file (written once per count)."""
    root = work / f"tiny-{tests}"
    if not root.is_dir():
        root.mkdir(parents=True)
        for start in range(0, tests, TINY_FILE_TESTS):
            lines = []
            for n in range(start, min(start + TINY_FILE_TESTS, tests)):
                lines.append(
                    f"def test_{n}():\n"
                    f"    values = [i * {n} for i in range(20)]\n"
                    f"    assert sum(values) == {n} * 190\n\n"
                )
            (root / f"test_tiny_{start // TINY_FILE_TESTS:04d}.py").write_text(
                "\n".join(lines), encoding="utf-8"
            )
    return Suite("tiny", root, (".",))


def run_once(python: str, suite: Suite, mode: Mode, timeout: float) -> None:
    """One fresh pytest process; records its wall and CPU time and its pass count."""
    env = {k: v for k, v in os.environ.items() if k not in CLEARED_ENV}
    env.update(PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1", PYTEST_ADDOPTS="")
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *mode.args, *suite.targets]
    cpu_before = children_cpu()
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=suite.cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    sampler = ThreadCpu(proc.pid)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise SystemExit(f"{suite.name} {mode.name}: ran past {timeout} s") from None
    finally:
        sampler.stop()
    wall = time.perf_counter() - start
    found = SUMMARY.findall(out)
    if proc.returncode != 0 or not found:
        raise SystemExit(f"{suite.name} {mode.name}: pytest failed ({proc.returncode}):\n{out}")
    mode.wall.append(wall)
    mode.cpu.append(children_cpu() - cpu_before)
    mode.passed.add(int(found[-1]))
    mode.threads.append(sampler.by_role())


class ThreadCpu:
    """The CPU seconds of a running process's threads, read from ``/proc`` (Linux) every
    ``every`` seconds on a thread of this process: the last reading of each thread, summed
    by role: ``main`` (the thread that runs the tests), each of memtape's threads by name
    (``memtape-flusher`` writes a capture, ``memtape-follow`` analyses a long test's
    capture alongside it), and ``other``. What a thread used after the last
    reading (at most ``every``) is missing: these say where the time went, not how much
    there was (``Mode.cpu`` does)."""

    def __init__(self, pid: int, every: float = THREAD_READ_EVERY) -> None:
        self.pid = pid
        self.every = every
        self.latest: dict[int, tuple[str, float]] = {}
        self.done = threading.Event()
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.thread = threading.Thread(target=self._run, name="thread-cpu", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            self._read()
            if self.done.wait(self.every):
                return

    def _read(self) -> None:
        try:
            tids = os.listdir(f"/proc/{self.pid}/task")
        except OSError:
            return
        for tid in tids:
            try:
                # A thread's name may hold any byte: decoded leniently, the name is only shown.
                with open(
                    f"/proc/{self.pid}/task/{tid}/stat", encoding="utf-8", errors="replace"
                ) as f:
                    stat = f.read()
            except OSError:
                continue  # the thread ended meanwhile
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            # After the name: state, then fields 4..; utime and stime are fields 14 and 15.
            fields = stat[stat.rindex(")") + 2 :].split()
            self.latest[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / self.tick)

    def stop(self) -> None:
        self.done.set()
        self.thread.join()

    def by_role(self) -> dict[str, float]:
        roles: dict[str, float] = {}
        for tid, (name, seconds) in self.latest.items():
            role = "main" if tid == self.pid else name if name.startswith("memtape") else "other"
            roles[role] = roles.get(role, 0.0) + seconds
        return roles


def children_cpu() -> float:
    """CPU seconds (user + system) used by this process's finished children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def report(suite: Suite, results: list[Mode]) -> dict[str, object]:
    medians = {m.name: statistics.median(m.wall) for m in results}
    runs = ", ".join(f"{m.name} {len(m.wall)}" for m in results)
    print(f"\n{suite.name}: interleaved runs per mode: {runs}")
    print(
        f"{'mode':<9}{'tests':>7}{'median s':>10}{'best s':>8}{'cpu s':>8}"
        f"{'x plain':>9}{'x memray':>10}"
    )
    rows: dict[str, object] = {}
    by_thread: list[str] = []
    for mode in results:
        median = medians[mode.name]
        x_plain = median / medians["plain"] if "plain" in medians else None
        x_memray = median / medians["memray"] if "memray" in medians else None
        roles = sorted({role for run in mode.threads for role in run})
        thread_cpu = {
            role: statistics.median(run.get(role, 0.0) for run in mode.threads) for role in roles
        }
        rows[mode.name] = {
            "tests": sorted(mode.passed),
            "median_s": median,
            "best_s": min(mode.wall),
            "median_cpu_s": statistics.median(mode.cpu),
            "x_plain": x_plain,
            "x_memray": x_memray,
            "wall_s": mode.wall,
            "median_thread_cpu_s": thread_cpu,
            # Each run's, in the order of `wall_s`: a slow run's extra time by thread.
            "thread_cpu_s": mode.threads,
        }
        shown = ", ".join(f"{role} {seconds:.2f}" for role, seconds in thread_cpu.items())
        by_thread.append(f"  {mode.name}: {shown}")
        tests = ",".join(map(str, sorted(mode.passed)))
        plain = f"{x_plain:.2f}x" if x_plain is not None else "-"
        memray = f"{x_memray:.2f}x" if x_memray is not None else "-"
        print(
            f"{mode.name:<9}{tests:>7}{median:>10.2f}{min(mode.wall):>8.2f}"
            f"{statistics.median(mode.cpu):>8.2f}{plain:>9}{memray:>10}"
        )
    print(
        f"CPU seconds by thread, median of the runs (read every {THREAD_READ_EVERY} s: "
        "what a thread used after its last reading is missing):"
    )
    print("\n".join(by_thread))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="interpreter measured")
    parser.add_argument("--runs", type=int, default=3, help="runs per mode (default 3)")
    parser.add_argument(
        "--peer-runs",
        type=int,
        default=None,
        help="runs of pytest --memray, in the first of the interleaved rounds (default: --runs)",
    )
    parser.add_argument("--modes", default=",".join(MODES), help="plain,memray,memtape")
    parser.add_argument("--suites", default=",".join(SUITES), help="more-itertools,tiny")
    parser.add_argument("--tiny-tests", type=int, default=5000, help="tests in the tiny suite")
    parser.add_argument("--work", type=Path, default=HERE / "out" / "pytest_plugin")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    parser.add_argument("--json", type=Path, help="write the numbers here too")
    parser.add_argument("--quick", action="store_true", help="small suites, one run")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.tiny_tests = 1, 150
    peer_runs = args.runs if args.peer_runs is None else min(args.peer_runs, args.runs)
    if args.runs < 1 or peer_runs < 1:
        parser.error("--runs and --peer-runs: at least 1")
    names = args.modes.split(",")
    suites = args.suites.split(",")
    if sorted(set(names) - set(MODES)) or sorted(set(suites) - set(SUITES)):
        parser.error(f"modes: {', '.join(MODES)}; suites: {', '.join(SUITES)}")
    # The runs start in the suite's directory: a relative interpreter path would break.
    python = os.path.abspath(args.python) if os.sep in args.python else args.python
    numbers: dict[str, object] = {}
    for name in suites:
        if name == "tiny":
            suite = write_tiny_suite(args.work, args.tiny_tests)
        else:
            suite = fetch_more_itertools(python, args.work, args.quick)
        results = [Mode(m, MODES[m]) for m in names]
        for run in range(args.runs):
            for mode in results:
                if mode.name == "memray" and run >= peer_runs:
                    continue
                run_once(python, suite, mode, args.timeout)
                print(
                    f"{suite.name} run {run + 1}/{args.runs} {mode.name}: "
                    f"{mode.wall[-1]:.2f} s (cpu {mode.cpu[-1]:.2f} s)",
                    flush=True,
                )
        counts = {m.name: sorted(m.passed) for m in results}
        if len({tuple(c) for c in counts.values()}) != 1:
            raise SystemExit(f"{suite.name}: the modes ran different numbers of tests: {counts}")
        numbers[suite.name] = report(suite, results)
    if args.json:
        args.json.write_text(json.dumps(numbers, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
