"""What ``capture_traceback()`` costs a framework, with recording off and on (issue 32).

Frameworks call ``capture_traceback()`` at every array creation, whether or not memtape
records, so the off state must be nearly free. Prints, for the interpreter running it
(which must have memtape installed), nanoseconds per call at Python stack depths 1, 8
and 32, best of ``--repeats`` loops of ``--calls`` calls each, the empty loop's time taken
off:

- an empty Python function call (``def empty(): pass``), the yardstick;
- ``capture_traceback()`` from Python, while no recording is on and while the event
  recorder records (framework events);
- the same through the C ABI (``memtape.h``'s ``capture_traceback``, the fake allocator
  of the C ABI tests calling it in a C loop; needs a C compiler).

Usage: python benchmarks/capture_traceback_cost.py [--calls N] [--repeats N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import memtape  # noqa: E402
from c_abi.build import build_fakecache, load  # noqa: E402

DEPTHS = (1, 8, 32)


def at_depth(depth: int, fn: Callable[[], Any]) -> Any:
    """Calls fn with `depth` Python frames on the stack below this one."""
    if depth <= 1:
        return fn()
    return at_depth(depth - 1, fn)


def empty() -> None:
    pass


def loop_ns(fn: Callable[[], object], calls: int, repeats: int) -> float:
    """ns per call of ``fn()``: the best of ``repeats`` loops, less the best empty loop."""
    loops, empties = [], []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter_ns()
        for _ in range(calls):
            pass
        t2 = time.perf_counter_ns()
        loops.append(t1 - t0)
        empties.append(t2 - t1)
    return (min(loops) - min(empties)) / calls


def c_abi_ns(module: ModuleType, calls: int, repeats: int) -> float:
    """Best ns per ``capture_traceback()`` called from C (the loop is in C)."""
    return min(float(module.time_capture(calls)[0]) for _ in range(repeats))


def measure(module: ModuleType, calls: int, repeats: int) -> list[dict[str, float]]:
    rows: list[dict[str, float]] = []
    capture = memtape.capture_traceback
    for depth in DEPTHS:
        row: dict[str, float] = {"depth": depth}
        row["empty_ns"] = at_depth(depth, lambda: loop_ns(empty, calls, repeats))
        assert capture() == 0, "a recording is on already"
        row["python_off_ns"] = at_depth(depth, lambda: loop_ns(capture, calls, repeats))
        row["c_abi_off_ns"] = at_depth(depth, lambda: c_abi_ns(module, calls, repeats))
        memtape.record_memory_events(True, 1000, sources=("framework",))
        try:
            row["python_on_ns"] = at_depth(depth, lambda: loop_ns(capture, calls, repeats))
            row["c_abi_on_ns"] = at_depth(depth, lambda: c_abi_ns(module, calls, repeats))
        finally:
            memtape.record_memory_events(False)
        rows.append(row)
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--calls", type=int, default=200_000)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        module = load(build_fakecache(Path(tmp)))
    rows = measure(module, args.calls, args.repeats)
    print(
        f"python {sys.version.split()[0]}: ns per call, best of {args.repeats} loops of "
        f"{args.calls:,} calls, the empty loop taken off"
    )
    head = ("depth", "empty call", "Python off", "x empty", "Python on", "C ABI off", "C ABI on")
    print("  ".join(f"{h:>10}" for h in head))
    for r in rows:
        cells = (
            f"{r['depth']:.0f}",
            f"{r['empty_ns']:.1f}",
            f"{r['python_off_ns']:.1f}",
            f"{r['python_off_ns'] / r['empty_ns']:.2f}x",
            f"{r['python_on_ns']:.1f}",
            f"{r['c_abi_off_ns']:.1f}",
            f"{r['c_abi_on_ns']:.1f}",
        )
        print("  ".join(f"{c:>10}" for c in cells))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
