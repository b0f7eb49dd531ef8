"""Allocation-heavy workload: build 170,000 small dicts, JSON-dump and reload them, 3 rounds.

Modelled on the "json" workload of shared/research/tracemalloc.md section 4 (about 1.3 s
untraced on a 2-core VM with CPython 3.11). Nearly every allocation is a small object
served by pymalloc (dicts, str, float, int), so the cost of a tracer per allocation
dominates. The call stack stays shallow (a few frames).

Run alone: ``python benchmarks/workloads/alloc_heavy.py`` prints the elapsed seconds.
"""

from __future__ import annotations

import json
import time

PARAMS = {"rows": 170_000, "rounds": 3}
QUICK_PARAMS = {"rows": 2_000, "rounds": 1}


def make_rows(rows: int) -> list[dict[str, object]]:
    return [
        {"id": i, "name": f"item-{i}", "score": i * 0.5, "kind": f"k{i % 13}"} for i in range(rows)
    ]


def main(rows: int = PARAMS["rows"], rounds: int = PARAMS["rounds"]) -> int:
    total = 0
    for _ in range(rounds):
        data = make_rows(rows)
        text = json.dumps(data)
        total += len(json.loads(text))
    return total


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"alloc_heavy: {time.perf_counter() - start:.3f} s")
