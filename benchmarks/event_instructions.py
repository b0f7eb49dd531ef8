"""Instructions per recorded event on a reduced alloc_heavy, counted by callgrind.

Runs ``alloc_heavy.main(rows=N, rounds=1)`` in a fresh interpreter under valgrind's
callgrind, untraced, under ``memtape.tracemalloc.start(1)`` and with the event recorder
on (``memtape.record_memory_events(True, 100_000)``, the ``memtape-events`` config of
``benchmarks/run.py``). Each count is a run with ``N`` rows less one with 0 rows, so that
start-up, imports and starting the tracer drop out. Prints the workload's instructions,
the ratio over untraced, and the instructions per allocator event (events counted by
the recorder itself: kept plus dropped).

The clock is not counted faithfully: valgrind hides the vDSO, so a ``clock_gettime`` is
a system call whose kernel side callgrind does not see, and ``rdtsc`` is one instruction.

Usage: python benchmarks/event_instructions.py [--rows N]   (about 2 minutes)
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

from capture_instructions import instructions

REPO = Path(__file__).resolve().parent.parent

WORKLOAD = """
import sys
sys.path.insert(0, {workloads!r})
import alloc_heavy
import memtape
import memtape.tracemalloc as tm
mode = {mode!r}
if mode == "tracemalloc1":
    tm.start(1)
elif mode == "events":
    memtape.record_memory_events(True, 100_000)
alloc_heavy.main(rows={rows}, rounds=1)
if mode == "tracemalloc1":
    tm.stop()
elif mode == "events":
    memtape.record_memory_events(False)
    kept, dropped = memtape._native.memory_event_counts()
    print("events", kept + dropped)
"""

MODES = ("untraced", "tracemalloc1", "events")


def run(mode: str, rows: int) -> tuple[int, int]:
    """(instructions callgrind counts, events recorded) for one interpreter; the events
    are counted by a second run without valgrind (the same allocations)."""
    code = WORKLOAD.format(workloads=str(REPO / "benchmarks" / "workloads"), mode=mode, rows=rows)
    plain = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    events = re.search(r"events (\d+)", plain)
    return instructions(code), int(events.group(1)) if events else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--rows", type=int, default=10_000)
    p.add_argument("--modes", default=",".join(MODES))
    args = p.parse_args()
    print(f"python {sys.version.split()[0]}, alloc_heavy rows={args.rows} rounds=1")
    counts: dict[str, int] = {}
    events = 0
    for mode in args.modes.split(","):
        high, n = run(mode, args.rows)
        low, n0 = run(mode, 0)
        counts[mode] = high - low
        events = max(events, n - n0)
    base = counts.get("untraced")
    for mode, n in counts.items():
        ratio = f"{n / base:5.2f}x" if base else "-"
        print(f"{mode:<14} {n / 1e6:9.1f} M instructions  {ratio}")
    if events:
        print(f"events recorded: {events:,}")
        for mode, n in counts.items():
            if base and mode != "untraced":
                print(f"{mode:<14} {(n - base) / events:7.1f} instructions per event over untraced")
        if "events" in counts and "tracemalloc1" in counts:
            extra = (counts["events"] - counts["tracemalloc1"]) / events
            print(f"events over tracemalloc1: {extra:7.1f} instructions per event")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
