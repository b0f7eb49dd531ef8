"""Measures every performance target of issue 32 side by side and writes RESULTS.md's first table.

One command composes the other scripts, each in its own process, in rounds taken at
different times (``--pause`` seconds between rounds):

- ``run.py --json`` on alloc_heavy: untraced, memtape and stdlib tracemalloc at nframe 1,
  memtape at nframe 25, memray, the event recorder (``memtape-events``) and ``memtape run``'s
  recording (``memtape-capture``); on deep_recursion: untraced, memtape at nframe 25, memray;
- ``hook_floor.py``: the cheapest exact recorders PEP 445 hooks allow, beside the hot-path
  recorders, in one process (CPython 3.11 and 3.12): the hot rows name both, so that a
  reader sees how far each recorder is from what any exact one pays on the host that hour;
- ``mypy_run.py`` (mypy under ``memtape run``, ``-q`` and memray: time and peak RSS) and
  ``mypy_native.py`` (``--native`` beside memray ``--native``);
- ``native_compare.py`` on the pandas and numpy workloads and on alloc_heavy: ``--native``
  beside memray ``--native`` and peak RSS (untraced, ``memtape run``, ``memtape run -q``,
  memray);
- ``reports.py``: ``memtape stats`` and the flame graph on alloc_heavy's 36 M-event capture,
  memray's beside them;
- ``pytest_plugin.py``: plain ``pytest``, ``pytest --memray`` and ``pytest --memtape`` on
  more-itertools' own suite and on 5,000 tiny tests: ``--pytest-runs`` interleaved runs of
  plain ``pytest`` and ``pytest --memtape`` per round (default 3, as the other parts' runs
  per configuration: one run of a suite swings by a fifth on this host), and one of
  ``pytest --memray`` (shown beside, not a target; it takes the tiny suite about nine times
  plain's time); a round of them takes about five minutes.

Each round's value of a target comes from that round's runs (medians over ``--runs``,
interleaved); the table shows every round's value, their median, the target and whether
the median holds it, with the date, the commit, the CPython version and the load average
at the start and end of each round. A round whose untraced alloc_heavy runs spread by more
than a quarter is called unsteady: its hot-path values are marked, and a verdict that the
steady rounds alone would not give says so.

    python3 benchmarks/results_page.py --python .venv-3.11/bin/python            # print
    python3 benchmarks/results_page.py --python .venv-3.11/bin/python --write    # RESULTS.md
    python3 benchmarks/results_page.py --quick                                   # ~1 min check

``--quick`` runs the smallest sizes once: the page then says QUICK, its numbers mean nothing.
On CPython 3.14, in the root of ``scripts/sid_root.sh`` (``--commit`` names the commit
where git cannot run):

    bash scripts/sid_root.sh run .venv-3.14/bin/python benchmarks/results_page.py \\
        --python .venv-3.14/bin/python

``--parts`` measures some of the targets only (the others read "not measured"),
``--runs`` sets the runs per configuration within a round and ``--mypy-target`` what
mypy checks. Raw numbers go to ``benchmarks/out/results-page-<time>.json``;
``--from-json`` makes the table again from such a file without measuring.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def shown_path(path: str) -> str:
    """``path`` as the page shows it: relative to the checkout when inside it, so that the
    page names no machine's directories."""
    inside = Path(path).is_absolute() and Path(path).is_relative_to(ROOT)
    return os.path.relpath(path, ROOT) if inside else path


RESULTS = HERE / "RESULTS.md"
BEGIN = "<!-- results_page.py: begin (generated; edit the script, not this table) -->"
END = "<!-- results_page.py: end -->"
# A 1-minute load average above this at a round's start means others used the CPUs.
BUSY_LOADAVG = 1.0
#: A round whose untraced alloc_heavy runs differ by more than this (slowest over fastest,
#: less one) measured the host as much as memtape (HISTORY 50: 1.25, 2.06 and 1.85 s in
#: one round, CPU seconds as slow as the wall's): its hot-path values are marked, and a
#: verdict that would differ on the steady rounds alone says so.
UNSTEADY_SPREAD = 0.25
# The full measurement's options: three rounds five minutes apart.
FULL_RUN = ("--rounds", "3", "--pause", "300", "--write")
DEFAULT_MYPY_TARGET = str(ROOT / "python" / "memtape")
PARTS = ("hot", "deep", "floor", "mypy", "mypy-native", "native", "reports", "pytest")
# hook_floor.py: the rounds it alternates within one process, and the versions it reads.
FLOOR_RUNS = 12
FLOOR_VERSIONS = ((3, 11), (3, 12))
# The floor step each hot-path recorder is shown beside (hook_floor.py's rows).
FLOOR_CHAIN = "floor: + chain + lock"

# pytest_plugin.py's suites, and how the page names them.
PYTEST_SUITES = {"more-itertools": "more-itertools' suite", "tiny": "5,000 tiny tests"}
PYTEST_MODES = ("plain", "memray", "memtape")
HOT_CONFIGS = "untraced,tracemalloc1,memtape1,memtape25,memray,memtape-events,memtape-capture"
DEEP_CONFIGS = "untraced,memtape25,memray"
NATIVE_CONFIGS = "untraced,memtape-summary,memtape,memtape-native,memray,memray-native"
# The library each native workload needs in --python, beyond memtape and memray.
NATIVE_NEEDS = {"pandas": "pandas", "numpy": "numpy", "alloc_heavy": "json"}
NATIVE_SCRIPTS = {
    "pandas": HERE / "native_workloads" / "pandas_frames.py",
    "numpy": HERE / "native_workloads" / "numpy_arrays.py",
    "alloc_heavy": HERE / "workloads" / "alloc_heavy.py",
}
MB = 1_000_000
MIB = 1024 * 1024
# A workload run as a script at its QUICK_PARAMS, for --quick.
QUICK_WRAPPER = (
    "import importlib.util, sys\n"
    "spec = importlib.util.spec_from_file_location('workload', {path!r})\n"
    "module = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(module)\n"
    "module.main(**module.QUICK_PARAMS)\n"
)
QUICK_MYPY_TARGET = "def double(x: int) -> int:\n    return 2 * x\n"

Round = dict[str, Any]


@dataclass(frozen=True)
class Target:
    """One target of issue 32 item 5: how a round's value is read, and the bound."""

    name: str
    goal: str
    holds: Callable[[float], bool]
    value: Callable[[Round], float | None]
    shown: Callable[[float], str]
    beside: Callable[[Round], str] = lambda _: ""
    part: str = ""


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def hot(data: Round, workload: str, config: str) -> float | None:
    """run.py's median seconds of one configuration on one workload."""
    configs = data.get("run", {}).get(workload, {}).get("configs", {})
    value = configs.get(config, {}).get("median_s")
    return float(value) if value is not None else None


def over_untraced(workload: str, config: str) -> Callable[[Round], float | None]:
    return lambda data: ratio(hot(data, workload, config), hot(data, workload, "untraced"))


def stdlib_speedup(data: Round) -> float | None:
    return ratio(hot(data, "alloc_heavy", "tracemalloc1"), hot(data, "alloc_heavy", "memtape1"))


def overhead_ratio(data: Round) -> float | None:
    base = hot(data, "alloc_heavy", "untraced")
    stdlib = hot(data, "alloc_heavy", "tracemalloc1")
    memtape = hot(data, "alloc_heavy", "memtape1")
    if base is None or stdlib is None or memtape is None or memtape <= base:
        return None
    return (stdlib - base) / (memtape - base)


def mypy_ratio(config: str) -> Callable[[Round], float | None]:
    def read(data: Round) -> float | None:
        configs = data.get("mypy", {}).get("configs", {})
        if config not in configs or "untraced" not in configs:
            return None
        walls = {name: statistics.median(w for w, _ in runs) for name, runs in configs.items()}
        return ratio(walls[config], walls["untraced"])

    return read


def mypy_native_cpu(data: Round) -> float | None:
    configs = data.get("mypy-native", {}).get("configs", {})
    memtape, memray = configs.get("memtape --native"), configs.get("memray --native")
    return ratio(memtape[1], memray[1]) if memtape and memray else None


def native_median(data: Round, workload: str, config: str, key: str) -> float | None:
    row = data.get("native", {}).get(workload, {}).get("configs", {}).get(config)
    return statistics.median(row[key]) if row and row[key] else None


def native_cpu(workload: str) -> Callable[[Round], float | None]:
    return lambda data: ratio(
        native_median(data, workload, "memtape-native", "cpu_s"),
        native_median(data, workload, "memray-native", "cpu_s"),
    )


def native_cpu_beside(workload: str) -> Callable[[Round], str]:
    def text(data: Round) -> str:
        base = native_median(data, workload, "untraced", "cpu_s")
        memtape = ratio(native_median(data, workload, "memtape-native", "cpu_s"), base)
        memray = ratio(native_median(data, workload, "memray-native", "cpu_s"), base)
        return f"CPU x untraced: memtape {times(memtape)}, memray {times(memray)}"

    return text


# The peak RSS rows' configurations, in the order shown: native_compare.py's names, and
# mypy_run.py's for the same runs.
MYPY_RSS_CONFIGS = {
    "untraced": "untraced",
    "memtape-summary": "memtape run",
    "memtape": "memtape run -q",
    "memray": "memray run",
}
# The programs whose peak RSS the page compares: native_compare.py's, and mypy.
RSS_PROGRAMS = ("alloc_heavy", "pandas", "mypy")


def peak_rss(data: Round, program: str, config: str) -> float | None:
    """The median peak RSS (MiB) of `config` (native_compare.py's name) on `program`:
    mypy_run.py's runs for mypy, native_compare.py's for the others."""
    if program != "mypy":
        return native_median(data, program, config, "rss_mib")
    runs = data.get("mypy", {}).get("rss_mib", {}).get(MYPY_RSS_CONFIGS[config])
    return statistics.median(runs) if runs else None


def rss_overhead(data: Round, program: str, config: str) -> float | None:
    base = peak_rss(data, program, "untraced")
    peak = peak_rss(data, program, config)
    return peak - base if peak is not None and base is not None else None


def rss_ratio(program: str) -> Callable[[Round], float | None]:
    return lambda data: ratio(
        rss_overhead(data, program, "memtape-summary"), rss_overhead(data, program, "memray")
    )


def rss_beside(program: str) -> Callable[[Round], str]:
    def text(data: Round) -> str:
        base = peak_rss(data, program, "untraced")
        parts = [f"untraced {base:.0f} MiB" if base is not None else "untraced -"]
        for label, config in (
            ("run", "memtape-summary"),
            ("run -q", "memtape"),
            ("memray", "memray"),
        ):
            extra = rss_overhead(data, program, config)
            parts.append(f"{label} +{extra:.0f}" if extra is not None else f"{label} -")
        return ", ".join(parts) + " MiB"

    return text


def report(data: Round, tool: str, key: str) -> float | None:
    value = data.get("reports", {}).get(tool, {}).get(key)
    return float(value) if value is not None else None


def slowest_report(data: Round, keys: tuple[str, str]) -> float | None:
    """The larger of memtape's two reports' numbers (stats, flame graph), if both ran."""
    stats, flame = (report(data, "memtape", key) for key in keys)
    return None if stats is None or flame is None else max(stats, flame)


def reports_seconds(data: Round) -> float | None:
    return slowest_report(data, ("stats_s", "flamegraph_s"))


def reports_mb(data: Round) -> float | None:
    mib = slowest_report(data, ("stats_rss_mib", "flamegraph_rss_mib"))
    return None if mib is None else mib * MIB / MB


def reports_beside(data: Round) -> str:
    events = report(data, "memtape", "events")
    stats, flame = report(data, "memray", "stats_s"), report(data, "memray", "flamegraph_s")
    shown = f"{events / 1e6:.1f} M events; " if events is not None else ""
    return shown + f"memray stats {seconds(stats)}, flame graph {seconds(flame)}"


def reports_mb_beside(data: Round) -> str:
    stats = report(data, "memray", "stats_rss_mib")
    flame = report(data, "memray", "flamegraph_rss_mib")
    mb = [None if v is None else v * MIB / MB for v in (stats, flame)]
    return f"memray stats {megabytes(mb[0])}, flame graph {megabytes(mb[1])}"


def pytest_wall(data: Round, suite: str, mode: str) -> float | None:
    """The median wall time of ``pytest`` (plain, memray or memtape) on ``suite``."""
    found = data.get("pytest", {}).get(suite, {}).get(mode)
    return found["median_s"] if found else None


def pytest_ratio(suite: str) -> Callable[[Round], float | None]:
    def read(data: Round) -> float | None:
        return ratio(pytest_wall(data, suite, "memtape"), pytest_wall(data, suite, "plain"))

    return read


def pytest_beside(suite: str) -> Callable[[Round], str]:
    def text(data: Round) -> str:
        plain, memray, memtape = (pytest_wall(data, suite, m) for m in PYTEST_MODES)
        return (
            f"pytest {seconds(plain)}, --memray {seconds(memray)} "
            f"({times(ratio(memray, plain))}), --memtape {seconds(memtape)}"
        )

    return text


def times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def megabytes(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} MB"


def floor_ratio(data: Round, row: str) -> float | None:
    """hook_floor.py's median, over its rounds, of `row`'s time over the untraced run of
    the same round (in process)."""
    seconds = data.get("floor", {}).get("seconds", {})
    untraced, measured = seconds.get("untraced"), seconds.get(row)
    if not untraced or not measured or len(untraced) != len(measured):
        return None
    return float(statistics.median(t / u for u, t in zip(untraced, measured, strict=True)))


def floor_beside(recorder: str) -> Callable[[Round], str]:
    """The recorder beside the floor of exact recording, both in one process
    (hook_floor.py; empty when that part did not run)."""

    def text(data: Round) -> str:
        floor = floor_ratio(data, FLOOR_CHAIN)
        if floor is None:
            return ""
        own = times(floor_ratio(data, recorder))
        return f"; in process: {recorder} {own}, the floor (stack + lock) {times(floor)}"

    return text


def beside_memray_and_floor(recorder: str) -> Callable[[Round], str]:
    """A hot row's "beside": memray on alloc_heavy, then `recorder` and the floor in
    process."""
    memray, floor = hot_beside("alloc_heavy", ("memray",)), floor_beside(recorder)
    return lambda data: memray(data) + floor(data)


def hot_beside(workload: str, peers: tuple[str, ...]) -> Callable[[Round], str]:
    def text(data: Round) -> str:
        base = hot(data, workload, "untraced")
        return ", ".join(
            f"{peer} {times(ratio(hot(data, workload, peer), base))}" for peer in peers
        )

    return text


def at_most(bound: float) -> Callable[[float], bool]:
    return lambda value: value <= bound


def at_least(bound: float) -> Callable[[float], bool]:
    return lambda value: value >= bound


def below(bound: float) -> Callable[[float], bool]:
    return lambda value: value < bound


TARGETS = (
    Target(
        "alloc_heavy, memtape.tracemalloc nframe 25",
        "<= 1.30x untraced",
        at_most(1.30),
        over_untraced("alloc_heavy", "memtape25"),
        times,
        beside_memray_and_floor("memtape25"),
        "hot",
    ),
    Target(
        "alloc_heavy, nframe 1: stdlib time / memtape time",
        ">= 6x as fast as tracemalloc",
        at_least(6.0),
        stdlib_speedup,
        times,
        lambda data: (
            f"overhead ratio (stdlib - untraced)/(memtape - untraced) "
            f"{times(overhead_ratio(data))}; "
            + hot_beside("alloc_heavy", ("tracemalloc1", "memtape1"))(data)
        ),
        "hot",
    ),
    Target(
        "alloc_heavy, event recorder (memtape-events)",
        "<= 1.60x untraced",
        at_most(1.60),
        over_untraced("alloc_heavy", "memtape-events"),
        times,
        beside_memray_and_floor("memtape-events"),
        "hot",
    ),
    Target(
        "alloc_heavy, `memtape run` capture (memtape-capture)",
        "<= 1.35x untraced",
        at_most(1.35),
        over_untraced("alloc_heavy", "memtape-capture"),
        times,
        beside_memray_and_floor("memtape-capture"),
        "hot",
    ),
    Target(
        "mypy under `memtape run` (wall)",
        "<= 1.30x untraced",
        at_most(1.30),
        mypy_ratio("memtape run"),
        times,
        lambda data: (
            f"memtape run -q {times(mypy_ratio('memtape run -q')(data))}, "
            f"memray run {times(mypy_ratio('memray run')(data))}"
        ),
        "mypy",
    ),
    Target(
        "deep_recursion, memtape25 time / memray time",
        "<= 1.00 (memray's)",
        at_most(1.0),
        lambda data: ratio(
            hot(data, "deep_recursion", "memtape25"), hot(data, "deep_recursion", "memray")
        ),
        times,
        hot_beside("deep_recursion", ("memtape25", "memray")),
        "deep",
    ),
    Target(
        "reports on alloc_heavy's capture: time (stats, flame graph)",
        "<= 1 s",
        at_most(1.0),
        reports_seconds,
        seconds,
        reports_beside,
        "reports",
    ),
    Target(
        "reports on alloc_heavy's capture: peak RSS",
        "<= 64 MB",
        at_most(64.0),
        reports_mb,
        megabytes,
        reports_mb_beside,
        "reports",
    ),
    Target(
        "mypy `--native`: memtape CPU / memray CPU",
        "< 1.00 (ahead of memray)",
        below(1.0),
        mypy_native_cpu,
        times,
        lambda _: "one run each per round (mypy_native.py)",
        "mypy-native",
    ),
    *(
        Target(
            f"{workload} `--native`: memtape CPU / memray CPU",
            "< 1.00 (ahead of memray)",
            below(1.0),
            native_cpu(workload),
            times,
            native_cpu_beside(workload),
            "native",
        )
        for workload in NATIVE_SCRIPTS
    ),
    *(
        Target(
            f"`pytest --memtape` on {shown} (wall) / plain `pytest`",
            "<= 1.30x",
            at_most(1.30),
            pytest_ratio(suite),
            times,
            pytest_beside(suite),
            "pytest",
        )
        for suite, shown in PYTEST_SUITES.items()
    ),
    *(
        Target(
            f"{program} peak RSS overhead: `memtape run` / memray",
            "<= 1.00 (memray's)",
            at_most(1.0),
            rss_ratio(program),
            times,
            rss_beside(program),
            "mypy" if program == "mypy" else "native",
        )
        for program in RSS_PROGRAMS
    ),
)


@dataclass
class Session:
    """What one invocation measures, and where its scratch files go."""

    args: argparse.Namespace
    scratch: Path
    rounds: list[Round] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)
    part_seconds: dict[str, float] = field(default_factory=dict)

    def script(self, name: str, *extra: str, output: Path, part: str) -> bool:
        """Runs one benchmark script; True when it wrote its JSON."""
        command = [sys.executable, str(HERE / name), "--python", self.args.python, *extra]
        print(f"$ {shlex.join(command)}", file=sys.stderr, flush=True)
        start = time.perf_counter()
        proc = subprocess.run(command, cwd=ROOT, stdout=sys.stderr, stderr=sys.stderr, check=False)
        took = time.perf_counter() - start
        self.part_seconds[part] = self.part_seconds.get(part, 0.0) + took
        print(f"  ({name} took {took:.1f} s)", file=sys.stderr, flush=True)
        if not output.exists():
            self.failures.append(f"`{name}` exited {proc.returncode} without its numbers")
            return False
        return True

    def importable(self, module: str) -> bool:
        """Whether --python can import a workload's library; names it once when not."""
        proc = subprocess.run(
            [self.args.python, "-c", f"import {module}"], capture_output=True, check=False
        )
        note = (
            f"`{module}` is not installed in {shown_path(self.args.python)} (pip install {module})"
        )
        if proc.returncode != 0 and note not in self.unavailable:
            self.unavailable.append(note)
        return proc.returncode == 0

    def floor_readable(self) -> bool:
        """Whether hook_floor.py can run in --python (it reads the frame layout of
        CPython 3.11 and 3.12); names it once when not."""
        proc = subprocess.run(
            [self.args.python, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        )
        version = tuple(int(n) for n in proc.stdout.split()) if proc.returncode == 0 else ()
        note = (
            f"the floor (`hook_floor.py`) reads the frames of CPython 3.11 and 3.12 only, "
            f"not {shown_path(self.args.python)}'s"
        )
        readable = version in FLOOR_VERSIONS
        if not readable and note not in self.unavailable:
            self.unavailable.append(note)
        return readable

    def workload(self, path: Path) -> Path:
        """The workload script to run whole: itself, or under --quick a small-size wrapper."""
        if not self.args.quick:
            return path
        wrapper = self.scratch / f"quick_{path.name}"
        wrapper.write_text(QUICK_WRAPPER.format(path=str(path)))
        return wrapper

    def mypy_target(self) -> str:
        if not self.args.quick:
            return str(self.args.mypy_target)
        target = self.scratch / "quick_mypy_target.py"
        target.write_text(QUICK_MYPY_TARGET)
        return str(target)

    def measure_runs(self, folder: Path, data: Round) -> None:
        """run.py on alloc_heavy (the hot part) and deep_recursion, into `data["run"]`."""
        args, quick = self.args, ["--quick"] if self.args.quick else []
        data["run"] = {}
        for part, workload, configs in (
            ("hot", "alloc_heavy", HOT_CONFIGS),
            ("deep", "deep_recursion", DEEP_CONFIGS),
        ):
            if part not in args.parts:
                continue
            out = folder / f"run-{workload}.json"
            run_args = ["--only", workload, "--configs", configs, "--runs", str(args.runs)]
            run_args += [*quick, "--json", str(out)]
            if self.script("run.py", *run_args, output=out, part=part):
                data["run"][workload] = json.loads(out.read_text())["workloads"][workload]

    def measure_floor(self, folder: Path, data: Round) -> None:
        """hook_floor.py's rounds, in one process, into `data["floor"]`."""
        out = folder / "floor.json"
        quick = self.args.quick
        floor_args = ["--runs", "1" if quick else str(FLOOR_RUNS), "--json", str(out)]
        floor_args += ["--rows", "500"] if quick else []
        if self.script("hook_floor.py", *floor_args, output=out, part="floor"):
            data["floor"] = json.loads(out.read_text())

    def measure_round(self, index: int) -> Round:
        args, runs = self.args, str(self.args.runs)
        data: Round = {
            "started": now().isoformat(timespec="seconds"),
            "loadavg_start": os.getloadavg(),
        }
        start = time.perf_counter()
        folder = self.scratch / f"round{index}"
        folder.mkdir()
        quick = ["--quick"] if args.quick else []
        if "hot" in args.parts or "deep" in args.parts:
            self.measure_runs(folder, data)
        if "floor" in args.parts and self.floor_readable():
            self.measure_floor(folder, data)
        if "mypy" in args.parts:
            out = folder / "mypy.json"
            target = self.mypy_target()
            mypy_args = ["--target", target, "--runs", runs, "--json", str(out)]
            if self.script("mypy_run.py", *mypy_args, output=out, part="mypy"):
                data["mypy"] = json.loads(out.read_text())
        if "mypy-native" in args.parts:
            out = folder / "mypy-native.json"
            target = self.mypy_target()
            native_args = ["--target", target, "--json", str(out)]
            if self.script("mypy_native.py", *native_args, output=out, part="mypy-native"):
                data["mypy-native"] = json.loads(out.read_text())
        if "native" in args.parts:
            data["native"] = {}
            for workload, path in NATIVE_SCRIPTS.items():
                if not self.importable(NATIVE_NEEDS[workload]):
                    continue
                out = folder / f"native-{workload}.json"
                script = str(self.workload(path))
                native_args = ["--script", script, "--runs", runs, "--configs", NATIVE_CONFIGS]
                native_args += ["--json", str(out)]
                if self.script("native_compare.py", *native_args, output=out, part="native"):
                    data["native"][workload] = json.loads(out.read_text())
        if "reports" in args.parts:
            out = folder / "reports.json"
            script = str(self.workload(NATIVE_SCRIPTS["alloc_heavy"]))
            report_args = ["--script", script, "--runs", runs, "--json", str(out)]
            if self.script("reports.py", *report_args, output=out, part="reports"):
                data["reports"] = json.loads(out.read_text())
        if "pytest" in args.parts:
            out = folder / "pytest.json"
            plugin_args = ["--runs", str(args.pytest_runs), "--peer-runs", "1", *quick]
            plugin_args += ["--json", str(out)]
            if self.script("pytest_plugin.py", *plugin_args, output=out, part="pytest"):
                data["pytest"] = json.loads(out.read_text())
        data["loadavg_end"] = os.getloadavg()
        data["seconds"] = time.perf_counter() - start
        return data


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def git_commit(given: str | None) -> str:
    """``git rev-parse --short HEAD``, with ``-dirty`` when tracked files changed."""
    if given:
        return f"{given} (given with --commit)"
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (no git here: pass --commit)"
    return head + ("-dirty" if dirty else "")


def interpreter(python: str) -> str:
    """The measured interpreter's version and build, its memray's version, and the kind of
    memtape build measured (profile-guided or plain: scripts/pgo_build.sh)."""
    code = (
        "import platform, importlib.metadata as m\n"
        "try: memray = m.version('memray')\n"
        "except m.PackageNotFoundError: memray = 'not installed'\n"
        "try:\n"
        "    import memtape._native as n\n"
        "    build = getattr(n, 'BUILD_KIND', 'plain')\n"
        "except ImportError as e: build = f'not importable ({e})'\n"
        "print(f'CPython {platform.python_version()} ({platform.python_implementation()}, "
        "{platform.python_compiler()}), memray {memray}, memtape build: {build}')\n"
    )
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
    return proc.stdout.strip() or f"unknown ({python} did not start: {proc.stderr.strip()})"


def reductions(args: argparse.Namespace) -> list[str]:
    """How this run falls short of the full measurement, in words; empty when it does not."""
    reduced = []
    if args.rounds < 3:
        reduced.append(f"{args.rounds} round(s), not 3")
    if args.runs < 3:
        # One run of alloc_heavy untraced read 1.18-1.54 s on a quiet machine (HISTORY 47):
        # a single run per round leaves a round's ratio to that noise.
        reduced.append(f"{args.runs} run(s) per configuration, not 3")
    if list(args.parts) != list(PARTS):
        reduced.append(f"parts {', '.join(args.parts)} only")
    if args.mypy_target != DEFAULT_MYPY_TARGET:
        reduced.append(f"mypy checks {args.mypy_target}, not python/memtape")
    return reduced


def cell(target: Target, value: float | None) -> str:
    return "n/a" if value is None else target.shown(value)


def unsteady(data: Round) -> str | None:
    """Why this round's hot-path values are the host's as much as memtape's (alloc_heavy's
    untraced runs spread more than ``UNSTEADY_SPREAD``), or None when they are steady."""
    configs = data.get("run", {}).get("alloc_heavy", {}).get("configs", {})
    runs = configs.get("untraced", {}).get("runs") or []
    walls = [float(r["seconds"]) for r in runs if r.get("seconds")]
    if len(walls) < 2:
        return None
    spread = max(walls) / min(walls) - 1
    if spread <= UNSTEADY_SPREAD:
        return None
    shown = ", ".join(f"{w:.2f}" for w in walls)
    return f"alloc_heavy's untraced runs read {shown} s ({spread:.0%} apart)"


def verdict_of(target: Target, values: list[float | None]) -> str:
    """Whether the median of ``values`` holds the target (n/a when a round has none)."""
    known = [v for v in values if v is not None]
    if not known or len(known) < len(values):
        return "n/a"
    return "**yes**" if target.holds(statistics.median(known)) else "**NO**"


def median_over_rounds(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def workload_table(rounds: list[Round]) -> list[str]:
    """Peak RSS (untraced, memtape run, -q, memray) and --native CPU seconds per workload."""
    lines = [
        "Peak RSS (MiB) and `--native` CPU seconds per program, medians over the rounds "
        "(native_compare.py; mypy: peak RSS from mypy_run.py, CPU from mypy_native.py):",
        "",
        "| program | untraced | `memtape run` | `memtape run -q` | memray | "
        "`memtape run --native` CPU s | `memray run --native` CPU s |",
        "|---|---|---|---|---|---|---|",
    ]
    cpu_by_program = {
        workload: [
            median_over_rounds([native_median(d, workload, c, "cpu_s") for d in rounds])
            for c in ("memtape-native", "memray-native")
        ]
        for workload in NATIVE_SCRIPTS
    }
    cpu_by_program["mypy"] = [
        median_over_rounds(
            [
                (d.get("mypy-native", {}).get("configs", {}).get(config) or [None, None])[1]
                for d in rounds
            ]
        )
        for config in ("memtape --native", "memray --native")
    ]
    for program, cpu in cpu_by_program.items():
        rss = [
            median_over_rounds([peak_rss(d, program, c) for d in rounds]) for c in MYPY_RSS_CONFIGS
        ]
        cells = [f"{v:.0f}" if v is not None else "n/a" for v in rss]
        cells += [f"{v:.2f}" if v is not None else "n/a" for v in cpu]
        lines.append(f"| {program} | " + " | ".join(cells) + " |")
    return lines


def pytest_table(rounds: list[Round]) -> list[str]:
    """Wall seconds of plain pytest, pytest --memray and pytest --memtape per suite."""
    lines = [
        "The pytest plugin: wall seconds of a whole `pytest -q` run (start-up included), "
        "each mode's median over the rounds (pytest_plugin.py), and in brackets that median "
        "over plain `pytest`'s (the targets above take the median of each round's ratio):",
        "",
        "| suite | `pytest` | `pytest --memray` | `pytest --memtape` |",
        "|---|---|---|---|",
    ]
    for suite, shown in PYTEST_SUITES.items():
        walls = {
            mode: median_over_rounds([pytest_wall(d, suite, mode) for d in rounds])
            for mode in PYTEST_MODES
        }
        cells = [
            f"{seconds(walls[mode])} ({times(ratio(walls[mode], walls['plain']))})"
            for mode in PYTEST_MODES
        ]
        lines.append(f"| {shown} | " + " | ".join(cells) + " |")
    return lines


def render(raw: dict[str, Any]) -> str:
    """The table between the markers, from what a run saved (its raw JSON)."""
    meta, rounds = raw["meta"], raw["rounds"]
    args = argparse.Namespace(**meta["args"])
    lines = [BEGIN, ""]
    if args.quick:
        lines += [
            "**QUICK run (`--quick`): smallest sizes, one run each; these numbers mean nothing.**",
            "",
        ]
    reduced = reductions(args)
    if reduced and not args.quick:
        full = shlex.join(
            [
                "python3",
                "benchmarks/results_page.py",
                "--python",
                shown_path(args.python),
                *FULL_RUN,
            ]
        )
        lines += [
            f"**REDUCED run ({'; '.join(reduced)}): not the measurement the targets ask for.** "
            f"The full three-round run is to be done on a quiet machine: `{full}`.",
            "",
        ]
    busiest = max((data["loadavg_start"][0] for data in rounds), default=0.0)
    if busiest > BUSY_LOADAVG:
        lines += [
            f"**The machine was busy** (1-minute load average up to {busiest:.2f} at a round's "
            f"start, {os.cpu_count()} CPUs): every number below is slowed by other processes.",
            "",
        ]
    lines += [
        f"Command: `{meta['command']}`",
        "",
        f"- date: {meta['started']}; commit {meta['commit']}",
        f"- {meta['interpreter']}; {meta['machine']}",
        f"- {len(rounds)} round(s), {args.runs} run(s) per configuration in each "
        f"round ({getattr(args, 'pytest_runs', 1)} of plain pytest and pytest --memtape, "
        f"1 of pytest --memray), {args.pause:g} s "
        f"between rounds; parts: {', '.join(args.parts)}",
    ]
    unsteady_why = [unsteady(data) for data in rounds]
    for index, (data, why) in enumerate(zip(rounds, unsteady_why, strict=True), 1):
        start = ", ".join(f"{v:.2f}" for v in data["loadavg_start"])
        end = ", ".join(f"{v:.2f}" for v in data["loadavg_end"])
        lines.append(
            f"- round {index}: started {data['started']}, took {data['seconds']:.0f} s; "
            f"load average (1, 5, 15 min) {start} at the start, {end} at the end"
        )
        if why:
            lines.append(
                f"- **round {index} was unsteady**: {why}; its hot-path values (marked "
                '"unsteady") measure the host as much as memtape'
            )
    took = ", ".join(f"{part} {s:.0f} s" for part, s in raw["part_seconds"].items())
    lines.append(f"- time per part, all rounds: {took}")
    for failure in raw["failures"]:
        lines.append(f"- FAILED: {failure} (its rows read n/a)")
    for note in raw["unavailable"]:
        lines.append(f"- not measured: {note}; its rows read n/a")
    numbers = range(1, len(rounds) + 1)
    header = ["target", "goal", *(f"round {i}" for i in numbers), "median", "holds", "beside"]
    lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for target in TARGETS:
        values = [target.value(data) for data in rounds]
        median = median_over_rounds(values)
        marked = [target.part == "hot" and why is not None for why in unsteady_why]
        measured = target.part in args.parts
        verdict = verdict_of(target, values) if measured else "not measured"
        steady = [v for v, m in zip(values, marked, strict=True) if not m]
        if any(marked) and steady and verdict_of(target, steady) != verdict:
            again = verdict_of(target, steady).strip("*")
            verdict += f" (steady rounds only: {cell(target, median_over_rounds(steady))}, {again})"
        beside = "; ".join(target.beside(data) for data in rounds[-1:]) if measured else ""
        row = [
            target.name,
            target.goal,
            *(
                cell(target, v) + (" unsteady" if m else "")
                for v, m in zip(values, marked, strict=True)
            ),
            cell(target, median),
            verdict,
            beside + (" (last round)" if len(rounds) > 1 and beside else ""),
        ]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", *workload_table(rounds)]
    if "pytest" in args.parts:
        lines += ["", *pytest_table(rounds)]
    lines += ["", END]
    return "\n".join(lines) + "\n"


def write_page(table: str, path: Path) -> None:
    """Replaces the table between the markers, or puts it under the page's title."""
    text = path.read_text() if path.exists() else "# Results\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        path.write_text(head + table.rstrip("\n") + tail)
        return
    title, _, body = text.partition("\n")
    path.write_text(f"{title}\n\n{table}\n{body.lstrip(chr(10))}")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--python", default=sys.executable, help="the interpreter measured")
    p.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    p.add_argument("--pause", type=float, default=0.0, help="seconds between rounds (default 0)")
    p.add_argument(
        "--runs", type=int, help="runs per configuration in each round (default 3; --quick 1)"
    )
    p.add_argument(
        "--pytest-runs",
        type=int,
        default=3,
        help="runs of plain pytest and pytest --memtape on each suite in each round, "
        "interleaved (default 3; pytest --memray runs once)",
    )
    p.add_argument("--quick", action="store_true", help="smallest sizes, to check it works")
    p.add_argument(
        "--parts",
        default=",".join(PARTS),
        help=f"comma-separated parts to measure (default all: {', '.join(PARTS)})",
    )
    p.add_argument(
        "--mypy-target",
        default=DEFAULT_MYPY_TARGET,
        help="the package mypy checks (default: python/memtape)",
    )
    p.add_argument(
        "--commit",
        help="the commit to print where git cannot run (inside scripts/sid_root.sh): "
        '"$(git describe --always --dirty)"',
    )
    p.add_argument("--write", action="store_true", help="replace the table in RESULTS.md")
    p.add_argument("--page", type=Path, default=RESULTS, help="the page --write changes")
    p.add_argument(
        "--from-json",
        type=Path,
        metavar="RAW",
        help="measure nothing: make the table again from an earlier run's raw numbers",
    )
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    if args.runs is None:
        args.runs = 1 if args.quick else 3
    # The scripts run in the checkout's root: paths given from elsewhere are made absolute.
    if os.sep in args.python:
        args.python = os.path.abspath(args.python)
    args.mypy_target = os.path.abspath(args.mypy_target)
    args.parts = [part for part in args.parts.split(",") if part]
    unknown = sorted(set(args.parts) - set(PARTS))
    if unknown:
        p.error(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.from_json:
        return publish(json.loads(args.from_json.read_text()), args, args.from_json)
    started = now()
    shown_argv = [os.path.relpath(HERE / "results_page.py", ROOT), *argv]
    meta = {
        "command": shlex.join(["python3", *shown_argv]),
        "started": f"{started:%Y-%m-%d %H:%M} UTC",
        "commit": git_commit(args.commit),
        "interpreter": interpreter(args.python),
        "machine": f"{platform.platform()}, {os.cpu_count()} CPUs",
        "args": {
            key: getattr(args, key)
            for key in (
                "python",
                "rounds",
                "runs",
                "pytest_runs",
                "pause",
                "quick",
                "parts",
                "mypy_target",
            )
        },
    }
    with tempfile.TemporaryDirectory(prefix="memtape-results-") as scratch:
        session = Session(args, Path(scratch))
        for index in range(1, args.rounds + 1):
            if index > 1 and args.pause:
                time.sleep(args.pause)
            print(f"== round {index} of {args.rounds}", file=sys.stderr, flush=True)
            session.rounds.append(session.measure_round(index))
    raw = {
        "meta": meta,
        "rounds": session.rounds,
        "failures": session.failures,
        "unavailable": session.unavailable,
        "part_seconds": session.part_seconds,
    }
    path = HERE / "out" / f"results-page-{started:%Y%m%d-%H%M%S}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(raw, indent=1) + "\n")
    return publish(raw, args, path)


def publish(raw: dict[str, Any], args: argparse.Namespace, path: Path) -> int:
    """Prints the table, or with --write puts it in the page; 1 when a part failed."""
    table = render(raw)
    if args.write:
        write_page(table, args.page)
        print(f"wrote the table to {args.page}", file=sys.stderr)
    else:
        print(table, end="")
    print(f"raw numbers: {path}", file=sys.stderr)
    return 1 if raw["failures"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
