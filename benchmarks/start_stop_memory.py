"""memtape's own memory across many start/stop cycles (benchmarks/HISTORY.md, Reliability).

Each cycle starts ``memtape.tracemalloc`` (25 frames) and event recording, allocates and
frees a few thousand blocks from a few call sites, takes a snapshot, reads the events,
and stops both. Every ``--every`` cycles it samples the process' RSS and, while tracing,
``get_tracemalloc_memory()`` (memtape's own tables). Prints one JSON object.

    .venv-3.11/bin/python benchmarks/start_stop_memory.py --cycles 1000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import memtape
import memtape.tracemalloc as tm

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * PAGE


def leaf(n: int) -> list[bytes]:
    return [bytes(64 + i % 512) for i in range(n)]


def middle(n: int) -> list[object]:
    return [leaf(n // 4), {"k": list(range(n // 8))}, leaf(n // 4)]


def cycle(n: int) -> int:
    tm.start(25)
    memtape.record_memory_events(True, 10_000, max_frames=16)
    kept = [middle(n) for _ in range(4)]
    own = tm.get_tracemalloc_memory()
    tm.take_snapshot().statistics("lineno")
    memtape.get_memory_events()
    del kept
    memtape.record_memory_events(False)
    tm.stop()
    return own


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cycles", type=int, default=1000)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--blocks", type=int, default=1000)
    args = parser.parse_args(argv)
    samples = []
    started = time.perf_counter()
    for i in range(args.cycles + 1):
        own = cycle(args.blocks)
        if i % args.every == 0:
            samples.append(
                {
                    "cycle": i,
                    "rss_mib": round(rss_bytes() / 2**20, 2),
                    "tracemalloc_memory_kib": round(own / 1024, 1),
                }
            )
    result = {
        "python": platform.python_version(),
        "cycles": args.cycles,
        "seconds": round(time.perf_counter() - started, 1),
        "samples": samples,
        # The first `every` cycles warm the allocator and memtape's tables up.
        "rss_growth_after_warmup_mib": round(
            samples[-1]["rss_mib"] - samples[min(1, len(samples) - 1)]["rss_mib"], 2
        ),
        # After stop: the last recording's events stay readable until the next one.
        "after_stop_tracemalloc_memory": tm.get_tracemalloc_memory(),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
