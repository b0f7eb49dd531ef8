"""NumPy/pandas workload: read a 400,000-row CSV, group it and merge it, 2 rounds.

Most of its memory is native: the CSV parser's buffers, hash tables of groupby and merge,
and the frames' NumPy blocks. The CSV text is written once to a temporary file before
``main()`` (outside any timing window), so each round parses it from disk like a user's
``read_csv``.

Run alone: ``python benchmarks/workloads/pandas_frames.py`` prints the elapsed seconds.
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np
import pandas as pd

PARAMS = {"rows": 400_000, "rounds": 2}
QUICK_PARAMS = {"rows": 5_000, "rounds": 1}

_CSV: dict[int, str] = {}


def csv_path(rows: int) -> str:
    """A CSV of ``rows`` rows (id, group, city, value, text), written once per process."""
    if rows not in _CSV:
        rng = np.random.default_rng(0)
        frame = pd.DataFrame(
            {
                "id": np.arange(rows),
                "group": rng.integers(0, 1_000, rows),
                "city": rng.choice(["Paris", "Lyon", "Nantes", "Lille", "Metz"], rows),
                "value": rng.random(rows),
                "text": [f"row-{i % 9973}" for i in range(rows)],
            }
        )
        fd, path = tempfile.mkstemp(suffix=".csv")
        os.close(fd)
        frame.to_csv(path, index=False)
        _CSV[rows] = path
    return _CSV[rows]


def main(rows: int = PARAMS["rows"], rounds: int = PARAMS["rounds"]) -> int:
    path = csv_path(rows)
    total = 0
    for _ in range(rounds):
        frame = pd.read_csv(path)
        sums = frame.groupby(["group", "city"], as_index=False)["value"].sum()
        merged = frame.merge(sums, on=["group", "city"], suffixes=("", "_sum"))
        total += len(merged) + int(merged["value_sum"].sum())
    return total


if __name__ == "__main__":
    csv_path(PARAMS["rows"])
    start = time.perf_counter()
    main()
    print(f"pandas_frames: {time.perf_counter() - start:.3f} s")
