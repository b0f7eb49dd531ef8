"""Times a real project's test suite run plain, under the standard library's tracemalloc
(``PYTHONTRACEMALLOC=N``) and under memtape (``MEMTAPE_TRACEMALLOC=N``): the cost of
leaving allocation tracebacks on for ResourceWarnings in a test suite or in CI.

The project is cachetools (476 tests, pure Python, no dependencies beyond pytest): its
sdist, which holds the tests, is downloaded from PyPI with pip once into ``--work`` and
unpacked there; the tests then run offline. Each run is a fresh
``python -m pytest -q -p no:cacheprovider tests`` (start-up and imports included, as a
user pays them); runs are interleaved round-robin, and each mode's best and median wall
and CPU times are printed, with the ratio of the best to the plain run's best.

    python3 benchmarks/test_suite_tracing.py --python .venv-3.11/bin/python     # 3 runs
    python3 benchmarks/test_suite_tracing.py --runs 1 --modes plain,memtape -k test_lru

The interpreter measured needs pytest and memtape installed (``scripts/venv.sh``).
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
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = "cachetools"
VERSION = "8.0.2"
# Tracer switches and allocator settings that would change what a run measures.
CLEARED_ENV = ("PYTHONTRACEMALLOC", "MEMTAPE_TRACEMALLOC", "PYTHONMALLOC", "PYTHONDEVMODE")
MODES = ("plain", "stdlib", "memtape")
SUMMARY = re.compile(r"(\d+) passed")


@dataclass
class Mode:
    """One way of running the suite and its measured runs."""

    name: str
    env: dict[str, str]
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    passed: set[int] = field(default_factory=set)


def modes(names: list[str], nframe: int) -> list[Mode]:
    env = {
        "plain": {},
        "stdlib": {"PYTHONTRACEMALLOC": str(nframe)},
        "memtape": {"MEMTAPE_TRACEMALLOC": str(nframe)},
    }
    return [Mode(name, env[name]) for name in names]


def fetch_project(python: str, work: Path) -> Path:
    """The unpacked sdist of the project (downloaded and unpacked once)."""
    source = work / f"{PROJECT}-{VERSION}"
    if (source / "tests").is_dir():
        return source
    work.mkdir(parents=True, exist_ok=True)
    sdist = work / f"{PROJECT}-{VERSION}.tar.gz"
    if not sdist.exists():
        pip = [python, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:"]
        subprocess.run([*pip, f"{PROJECT}=={VERSION}", "-d", str(work)], check=True)
    with tarfile.open(sdist) as archive:
        archive.extractall(work, filter="data")
    return source


def run_once(python: str, source: Path, mode: Mode, select: str | None, timeout: float) -> None:
    """One fresh pytest process; records its wall and CPU time and its pass count."""
    env = {k: v for k, v in os.environ.items() if k not in CLEARED_ENV}
    env.update(mode.env, PYTHONPATH=str(source / "src"), PYTHONHASHSEED="0")
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]
    if select:
        cmd += ["-k", select]
    cpu_before = children_cpu()
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=source, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise SystemExit(f"{mode.name}: the suite ran past {timeout} s") from None
    wall = time.perf_counter() - start
    found = SUMMARY.findall(out)
    if proc.returncode != 0 or not found:
        raise SystemExit(f"{mode.name}: pytest failed (exit {proc.returncode}):\n{out}")
    mode.wall.append(wall)
    mode.cpu.append(children_cpu() - cpu_before)
    mode.passed.add(int(found[-1]))


def children_cpu() -> float:
    """CPU seconds (user + system) used by this process's finished children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def report(results: list[Mode], nframe: int, python: str) -> dict[str, object]:
    base = min(results[0].wall)
    version = subprocess.run(
        [python, "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    print(f"\n{PROJECT} {VERSION} test suite, CPython {version}, {nframe} frames")
    print(f"{'mode':<10}{'tests':>7}{'best s':>10}{'median s':>10}{'cpu s':>9}{'x plain':>9}")
    rows = {}
    for mode in results:
        best = min(mode.wall)
        row = {
            "tests": sorted(mode.passed),
            "best_s": best,
            "median_s": statistics.median(mode.wall),
            "best_cpu_s": min(mode.cpu),
            "x_plain": best / base,
            "wall_s": mode.wall,
        }
        rows[mode.name] = row
        tests = ",".join(map(str, row["tests"]))  # type: ignore[call-overload]
        print(
            f"{mode.name:<10}{tests:>7}{best:>10.2f}{row['median_s']:>10.2f}"
            f"{row['best_cpu_s']:>9.2f}{row['x_plain']:>8.1f}x"
        )
    return {"project": f"{PROJECT}=={VERSION}", "python": version, "nframe": nframe, "modes": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="interpreter measured")
    parser.add_argument("--runs", type=int, default=3, help="runs per mode (default 3)")
    parser.add_argument("--nframe", type=int, default=25, help="frames per traceback")
    parser.add_argument("--modes", default=",".join(MODES), help="plain,stdlib,memtape")
    parser.add_argument("-k", dest="select", help="pytest -k expression (a smaller run)")
    parser.add_argument("--work", type=Path, default=HERE / "out" / "test_suite")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    parser.add_argument("--json", type=Path, help="write the numbers here too")
    args = parser.parse_args()
    names = args.modes.split(",")
    unknown = sorted(set(names) - set(MODES))
    if unknown or not names:
        parser.error(f"unknown modes {unknown}; choose from {', '.join(MODES)}")
    # The runs start in the project's directory: a relative interpreter path would break.
    python = os.path.abspath(args.python) if os.sep in args.python else args.python
    source = fetch_project(python, args.work)
    results = modes(names, args.nframe)
    for run in range(args.runs):
        for mode in results:
            run_once(python, source, mode, args.select, args.timeout)
            print(f"run {run + 1}/{args.runs} {mode.name}: {mode.wall[-1]:.2f} s", flush=True)
    counts = {m.name: sorted(m.passed) for m in results}
    if len({tuple(c) for c in counts.values()}) != 1:
        raise SystemExit(f"the modes ran different numbers of tests: {counts}")
    numbers = report(results, args.nframe, python)
    if args.json:
        args.json.write_text(json.dumps(numbers, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
