"""NumPy/pandas workload for benchmarks/native_compare.py (it needs pandas, so it is not
one of run.py's workloads): read a 400,000-row CSV, group it and merge it, 2 rounds.

Most of its memory is native: the CSV parser's buffers, hash tables of groupby and merge,
and the frames' NumPy blocks. The CSV is written once to the temporary directory (by the
first run) and each round parses it from disk like a user's ``read_csv``.

Run alone: ``python benchmarks/native_workloads/pandas_frames.py`` prints the elapsed seconds.
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np
import pandas as pd

PARAMS = {"rows": 400_000, "rounds": 2}
QUICK_PARAMS = {"rows": 5_000, "rounds": 1}


def csv_path(rows: int) -> str:
    """A CSV of ``rows`` rows (id, group, city, value, text) in the temporary directory,
    written by the first run and reused by later ones (so whole-process timings of later
    runs measure the work, not the data generation)."""
    path = os.path.join(tempfile.gettempdir(), f"memtape-pandas-frames-{rows}.csv")
    if os.path.exists(path):
        return path
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
    partial = f"{path}.{os.getpid()}"
    frame.to_csv(partial, index=False)
    os.replace(partial, path)
    return path


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
