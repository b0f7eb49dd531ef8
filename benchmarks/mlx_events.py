"""The MLX prototype's benchmarks (``benchmark_full``, ``benchmark_add``) on mlx[cpu],
with memtape recording MLX's buffers off and on.

Each op runs at the bottom of a 32-frame recursion (the stack depth the prototype
measured), 10, 20 or 30 times per call, with or without an ``mx.eval`` of the results;
recording is off (MLX imported, nothing attached) or on (``record_memory_events`` with
the framework source: every graph node's creation stack and primitive, every buffer
event). The cost per stack capture is (on - off) / nodes created, from the rows without
eval (``full`` builds two nodes, a broadcast and the full; ``add`` one).

A last row times a pure-Python workload with MLX imported but unused, recording the
Python heap with MLX attached or not: the MLX hooks cost it nothing.

Times are the best batch (the least disturbed by other load); off and on batches
alternate.

Usage: python benchmarks/mlx_events.py [--batches N] [--reps N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import memtape

DEPTH = 32
NODES_PER_OP = {"full": 2, "add": 1}


def workload(op: str, ops: int, evaluate: bool) -> Callable[[], Any]:
    import mlx.core as mx

    val = mx.array(10.0) if op == "full" else mx.full((10, 10), 10.0)
    mx.eval(val)

    def recursive_op(i: int, outs: list[Any]) -> None:
        if i == DEPTH - 1:
            outs.append(mx.full((10, 10), val) if op == "full" else val + val)
        else:
            recursive_op(i + 1, outs)

    def run() -> list[Any]:
        outs: list[Any] = []
        for _ in range(ops):
            recursive_op(0, outs)
        if evaluate:
            mx.eval(outs)
        return outs

    return run


def per_call_us(fn: Callable[[], Any], batches: int, reps: int) -> float:
    """Best over batches of the mean time per call, in microseconds (the least disturbed
    batch: the machine is shared)."""
    for _ in range(reps):
        fn()
    times = []
    for _ in range(batches):
        t0 = time.perf_counter_ns()
        for _ in range(reps):
            fn()
        times.append((time.perf_counter_ns() - t0) / reps / 1000)
    return min(times)


def off_and_on(fn: Callable[[], Any], batches: int, reps: int) -> tuple[float, float, float]:
    """(off, on) microseconds per call, alternating batches so that both see the same
    load, and MLX events per call while on."""
    off: list[float] = []
    on: list[float] = []
    events = 0
    for _ in range(batches):
        off.append(per_call_us(fn, 1, reps))
        memtape.record_memory_events(True, 1_000_000, sources=("framework",))
        on.append(per_call_us(fn, 1, reps))
        kept, dropped = memtape._native.memory_event_counts()
        memtape.record_memory_events(False)
        events += kept + dropped
    return min(off), min(on), events / (batches * 2 * reps)


def python_workload() -> list[dict[str, int]]:
    return [{"i": i, "s": str(i)} for i in range(2000)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=15)
    parser.add_argument("--reps", type=int, default=300)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import mlx.core as mx

    # MLX imported but unused: the Python heap traced with MLX attached (the framework
    # source) or not, in alternating batches.
    alone: list[float] = []
    attached: list[float] = []
    for _ in range(args.batches):
        memtape.record_memory_events(True, 100_000, sources=("python",))
        alone.append(per_call_us(python_workload, 1, 20))
        memtape.record_memory_events(True, 100_000)
        assert memtape._native._mlx_status()[0], "MLX is not attached"
        attached.append(per_call_us(python_workload, 1, 20))
    memtape.record_memory_events(False)
    before, after = min(alone), min(attached)

    rows = []
    print(f"mlx {mx.__version__}, {DEPTH}-frame stacks, best of {args.batches} x {args.reps}")
    print("op    ops  eval   off us    on us   on/off  ns/capture  events/call")
    for op in ("full", "add"):
        for evaluate in (False, True):
            for ops in (10, 20, 30):
                fn = workload(op, ops, evaluate)
                off, on, events = off_and_on(fn, args.batches, args.reps)
                capture_ns = (on - off) * 1000 / (ops * NODES_PER_OP[op])
                rows.append(
                    {
                        "op": op,
                        "ops": ops,
                        "eval": evaluate,
                        "off_us": off,
                        "on_us": on,
                        "ratio": on / off,
                        "ns_per_capture": None if evaluate else capture_ns,
                        "events_per_call": events,
                    }
                )
                shown = "-" if evaluate else f"{capture_ns:.0f}"
                print(
                    f"{op:5} {ops:4} {evaluate!s:5} {off:8.1f} {on:8.1f} {on / off:8.2f}"
                    f" {shown:>11} {events:12.1f}"
                )
    print(
        f"pure Python with MLX imported, heap traced: {before:.0f} us with MLX not attached, "
        f"{after:.0f} us attached: {after / before:.2f}x"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "python_before_us": before, "python_after_us": after}, f)


if __name__ == "__main__":
    main()
