"""Benchmarks of the event recorder and the framework API (issue: memory event recorder).

Prints, for the interpreter running it (which must have memtape installed):
- capture_traceback() cost at stack depth 1, 8 and 32: called from C through the C ABI
  (the path frameworks use) and from Python (including the call overhead);
- time and file size to dump 1,000,000 recorded events with dump_snapshot (pickle and
  JSON).

Usage: python benchmarks/framework_api.py [--events N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import memtape  # noqa: E402
from c_abi.build import build_fakecache, load  # noqa: E402


def at_depth(depth: int, fn: Callable[[], Any]) -> Any:
    """Calls fn with `depth` Python frames on the stack below this one."""
    if depth <= 1:
        return fn()
    return at_depth(depth - 1, fn)


def python_capture_ns(n: int) -> float:
    capture = memtape.capture_traceback
    noop = int  # a builtin call of the same shape, to subtract the loop and call cost
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            capture()
        t1 = time.perf_counter_ns()
        for _ in range(n):
            noop()
        t2 = time.perf_counter_ns()
        best = min(best, ((t1 - t0) - (t2 - t1)) / n)
    return best


def capture_costs(module: Any) -> list[dict[str, float]]:
    rows = []
    memtape.record_memory_events(True, 1000, sources=("framework",))
    try:
        for depth in (1, 8, 32):
            c_ns = min(at_depth(depth, lambda: module.time_capture(200_000)[0]) for _ in range(5))
            py_ns = at_depth(depth, lambda: python_capture_ns(200_000))
            rows.append({"depth": depth, "c_abi_ns": c_ns, "python_ns": py_ns})
    finally:
        memtape.record_memory_events(False)
    return rows


def record_churn(events: int) -> int:
    """Records `events` framework events (AllocNew / FreeActiveToOS pairs, 16 frames deep)
    and stops; returns how many the ring kept."""
    memtape.record_memory_events(True, events, sources=("framework",))
    base = 0x7F00_0000_0000

    def churn() -> None:
        for i in range(events // 2):
            addr = base + (i % 4096) * 0x10000
            memtape.record_allocator_event("AllocNew", addr, 4096 + (i % 7) * 512)
            memtape.record_allocator_event("FreeActiveToOS", addr, 0)

    at_depth(16, churn)
    memtape.record_memory_events(False)
    kept: int = memtape._native.memory_event_counts()[0]
    return kept


def dump_costs(events: int) -> dict[str, float]:
    kept = record_churn(events)
    out: dict[str, float] = {"events": kept}
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in ("pickle", "json"):
            path = os.path.join(tmp, f"snap.{fmt}")
            times = []
            for _ in range(3):
                t0 = time.perf_counter()
                memtape.dump_snapshot(path, format=fmt)  # type: ignore[arg-type]
                times.append(time.perf_counter() - t0)
            out[f"{fmt}_seconds"] = statistics.median(times)
            out[f"{fmt}_mib"] = os.path.getsize(path) / 2**20
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        module = load(build_fakecache(Path(tmp)))
    rows = capture_costs(module)
    print(f"python {sys.version.split()[0]}: capture_traceback() cost (best of 5)")
    print(f"{'depth':>5}  {'C ABI ns':>9}  {'Python ns':>9}")
    for r in rows:
        print(f"{r['depth']:>5}  {r['c_abi_ns']:>9.1f}  {r['python_ns']:>9.1f}")
    dump = dump_costs(args.events)
    print(f"\ndump_snapshot of {dump['events']:,.0f} events (median of 3)")
    for fmt in ("pickle", "json"):
        print(f"  {fmt:<6} {dump[f'{fmt}_seconds']:6.2f} s  {dump[f'{fmt}_mib']:8.1f} MiB")
    if args.json:
        args.json.write_text(json.dumps({"capture": rows, "dump": dump}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
