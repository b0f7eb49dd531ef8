"""The training run of memtape's profile-guided build (scripts/pgo_build.sh).

An instrumented build of the extension counts, while this runs, how often each branch of
memtape's code is taken; the release build then lays out the paths taken every time
together and keeps the rest out of their way. What this runs is what gets that layout,
and code it never reaches is optimised as cold, so it reaches every path whose speed is
measured or promised: each recorder's hooks (tracemalloc at 1 and 25 frames and on a
deep stack, the event recorder, a capture with and without native memory and native
stacks), what reads their results (snapshots and statistics, the PyTorch snapshot, the
capture's reports, the pytest plugin's per-test analysis), on small inputs: about 20
seconds with the instrumented build.

    python scripts/pgo_train.py        # run with the interpreter the build is for
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = ROOT / "benchmarks" / "workloads"
NATIVE_WORKLOADS = ROOT / "benchmarks" / "native_workloads"
sys.path.insert(0, str(WORKLOADS))

import alloc_heavy  # noqa: E402
import deep_recursion  # noqa: E402
import memtape  # noqa: E402
from memtape import tracemalloc  # noqa: E402

ROWS = 50_000

TINY_SUITE = """
import pytest

@pytest.mark.parametrize("n", range(200))
def test_tiny(n):
    assert len([str(i) for i in range(n)]) == n

def test_some_work():
    rows = [{"i": i, "s": str(i)} for i in range(20_000)]
    assert len(rows) == 20_000
"""


def tracemalloc_paths() -> None:
    """The drop-in at 1 and 25 frames, a deep stack, and what reads its traces."""
    for nframe in (1, 25):
        tracemalloc.start(nframe)
        alloc_heavy.main(rows=ROWS, rounds=1)
        snapshot = tracemalloc.take_snapshot()
        snapshot.statistics("lineno")
        snapshot.statistics("traceback")[:5]
        tracemalloc.stop()
    tracemalloc.start(25)
    deep_recursion.main(repeats=200, width=200, min_depth=100, max_depth=200)
    first = tracemalloc.take_snapshot()
    alloc_heavy.main(rows=ROWS // 4, rounds=1)
    tracemalloc.take_snapshot().compare_to(first, "filename")
    tracemalloc.stop()


def event_recorder_paths(scratch: Path) -> None:
    """The event recorder on the Python heap, then its PyTorch snapshot."""
    memtape.record_memory_events(True, 100_000)
    alloc_heavy.main(rows=ROWS, rounds=1)
    for _ in range(10_000):
        memtape.capture_traceback()
    # A framework's caching allocator, as MLX reports it, inside lazy ops' contexts.
    for i in range(2_000):
        with memtape.op_context("train", memtape.capture_traceback()):
            address = 0x7F00_0000_0000 + i * 4096
            memtape.record_allocator_event("AllocNew", address, 4096, requested_size=4000)
            memtape.record_allocator_event("FreeActiveToCache", address, 4096)
            memtape.record_allocator_event("AllocReuse", address, 4096, requested_size=4000)
            memtape.record_allocator_event("FreeActiveToOS", address, 4096)
    memtape.dump_snapshot(str(scratch / "events.pickle"))
    memtape.record_memory_events(False)


def memtape_cli(*args: str) -> None:
    """`memtape ARGS` in a child process (its own counts join this run's)."""
    subprocess.run(
        [sys.executable, "-m", "memtape", *args],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def capture_paths(scratch: Path) -> None:
    """`memtape run` (native memory on, off, and with native stacks) and the reports."""
    capture = str(scratch / "run.mtape")
    small = f"import sys; sys.path.insert(0, {str(WORKLOADS)!r}); import alloc_heavy; " + (
        f"alloc_heavy.main(rows={ROWS}, rounds=2)"
    )
    memtape_cli("run", "-q", "--force", "-o", capture, "-c", small)
    memtape_cli(
        "run", "-q", "--force", "--no-native-heap", "-o", str(scratch / "py.mtape"), "-c", small
    )
    native = str(NATIVE_WORKLOADS / "numpy_arrays.py")
    memtape_cli("run", "-q", "--force", "--native", "-o", str(scratch / "native.mtape"), native)
    for command in (
        ["stats"],
        ["top"],
        ["flamegraph", "-o", str(scratch / "flame.html")],
        ["report", "-o", str(scratch / "report.html")],
    ):
        memtape_cli(*command, capture)


def pytest_plugin_paths(scratch: Path) -> None:
    """The pytest plugin: a capture per test and its analysis, on a small suite."""
    suite = scratch / "suite"
    suite.mkdir()
    (suite / "test_tiny.py").write_text(TINY_SUITE)
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--memtape", str(suite)],
        check=True,
        cwd=suite,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="memtape-pgo-") as tmp:
        scratch = Path(tmp)
        tracemalloc_paths()
        event_recorder_paths(scratch)
        capture_paths(scratch)
        pytest_plugin_paths(scratch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
