"""Instructions per call of the MLX benchmark's rows (``mlx_events.py``), recording off
and on, counted by valgrind's callgrind: a measure the machine's load does not move.

Each row runs twice per setting (``--low`` and ``--high`` calls after 50 warm-up calls,
in a fresh interpreter under callgrind); the difference over the extra calls is the
cost of one call, without the interpreter's start and MLX's import. The extra per graph
node (``on - off`` over nodes per call) is the cost of one capture in the rows without
eval, and a capture plus its buffer's two events in the rows with eval.

Usage: python benchmarks/mlx_instructions.py [--low N] [--high N]
       (needs valgrind; about a minute per row)
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import memtape
from mlx_events import NODES_PER_OP, workload  # this script's folder is on sys.path

WARMUP = 50


def loop(op: str, ops: int, evaluate: bool, calls: int, on: bool) -> None:
    fn = workload(op, ops, evaluate)
    if on:
        memtape.record_memory_events(True, 1_000_000, sources=("framework",))
    for _ in range(WARMUP + calls):
        fn()


def instructions(op: str, ops: int, evaluate: bool, calls: int, on: bool) -> int:
    args = [op, str(ops), str(int(evaluate)), str(calls), str(int(on))]
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
         sys.executable, __file__, "--loop", *args],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    found = re.search(r"Collected : (\d+)", proc.stderr)
    assert found, proc.stderr[-2000:]
    return int(found.group(1))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--loop":
        op, ops, evaluate, calls, on = sys.argv[2:7]
        loop(op, int(ops), evaluate == "1", int(calls), on == "1")
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--low", type=int, default=40)
    parser.add_argument("--high", type=int, default=240)
    args = parser.parse_args()
    print("op    ops  eval    off instr     on instr  on/off  extra instr/node")
    for op in ("full", "add"):
        for evaluate in (False, True):
            for ops in (10, 20, 30):
                per_call = []
                for on in (False, True):
                    low = instructions(op, ops, evaluate, args.low, on)
                    high = instructions(op, ops, evaluate, args.high, on)
                    per_call.append((high - low) / (args.high - args.low))
                off, on_ = per_call
                extra = (on_ - off) / (ops * NODES_PER_OP[op])
                print(
                    f"{op:5} {ops:4} {evaluate!s:5} {off:12.0f} {on_:12.0f} {on_ / off:7.3f}"
                    f" {extra:17.0f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
