"""Instructions of a reduced alloc_heavy, counted by valgrind's callgrind (independent of load).

Rows (``--configs``): untraced, the stdlib's and ``memtape.tracemalloc`` at nframe 1,
memtape's at 25, a capture (what ``memtape run --no-native-heap`` records) and
``memtape-run`` (the capture with native allocations, ``memtape run``'s default); by
default untraced, memtape25 and the capture. Each row is the instructions of
``alloc_heavy.main(rows=N, rounds=1)`` less those of a run with no rows (start-up, imports
and the tracer's start and stop drop out), and the ratio over untraced; then the same of
the program's own thread, less a capture's stop (memtape's flusher encodes and compresses
a capture on a thread of its own; see ``program_thread_instructions``).

Usage: python benchmarks/alloc_instructions.py [--rows N] [--configs A,B] [--keep DIR]
       (``--keep`` writes each run's callgrind files there, one a thread, for
       callgrind_annotate: ``callgrind.NAME-01`` is the program's thread)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from capture_instructions import program_thread_instructions

REPO = Path(__file__).resolve().parent.parent

SETUP = {
    "untraced": ("", ""),
    "tracemalloc1": ("import tracemalloc as tm\ntm.start(1)\n", "tm.stop()\n"),
    "memtape1": ("import memtape.tracemalloc as tm\ntm.start(1)\n", "tm.stop()\n"),
    "memtape25": (
        "import memtape.tracemalloc as tm\ntm.start(25)\n",
        "tm.stop()\n",
    ),
    "memtape-capture": (
        "import memtape, os, tempfile\n"
        "path = os.path.join(tempfile.mkdtemp(), 'c.mtape')\n"
        'metadata = \'{"tool": "memtape", "nframe": 64}\'\n'
        "memtape._native._start_capture(path, metadata, 0, False)\n",
        "memtape._native._stop_capture()\n",
    ),
    # What `memtape run` records by default: the capture with native allocations.
    "memtape-run": (
        "import memtape, os, tempfile\n"
        "path = os.path.join(tempfile.mkdtemp(), 'c.mtape')\n"
        'metadata = \'{"tool": "memtape", "nframe": 64}\'\n'
        "memtape._native._start_capture(path, metadata, 0, True)\n",
        "memtape._native._stop_capture()\n",
    ),
}

PROGRAM = """
import sys
sys.path.insert(0, {workloads!r})
import alloc_heavy
{start}alloc_heavy.main(rows={rows}, rounds=1)
{stop}"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--rows", type=int, default=20_000)
    default = "untraced,memtape25,memtape-capture"
    p.add_argument("--configs", default=default, help=f"from {','.join(SETUP)}")
    p.add_argument("--keep", type=Path, default=None)
    args = p.parse_args()
    workloads = str(REPO / "benchmarks" / "workloads")
    base: tuple[int, int] | None = None
    print(f"alloc_heavy rows={args.rows} rounds=1 ({sys.version.split()[0]})")
    print(f"{'config':16} {'all threads':>13} {'x':>6} {'program thread':>15} {'x':>6}")
    for name in args.configs.split(","):
        start, stop = SETUP[name]
        counts = []
        for rows in (0, args.rows):
            code = PROGRAM.format(workloads=workloads, start=start, stop=stop, rows=rows)
            keep = None
            if args.keep is not None and rows:
                args.keep.mkdir(parents=True, exist_ok=True)
                keep = str(args.keep / f"callgrind.{name}")
            counts.append(program_thread_instructions(code, keep))
        work = counts[1][0] - counts[0][0]
        own = counts[1][1] - counts[0][1]
        base = base if base is not None else (work, own)
        print(
            f"{name:16} {work / 1e6:11.1f} M {work / base[0]:5.2f}x"
            f" {own / 1e6:13.1f} M {own / base[1]:5.2f}x",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
