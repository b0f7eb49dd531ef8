"""NumPy workload for benchmarks/native_compare.py: 3 rounds of two 2000x2000 random
matrices, their product (BLAS), a row-wise sort, a concatenation and a real FFT, all
alive together at each round's end (about 260 MB), then dropped.

Most of its memory is NumPy's array buffers (NumPy's allocator, which memtape records as
the framework source and memray as native `malloc`/`calloc`); its Python heap is small.
The peak is the one moment of each round when every array is alive: both tools must
agree on it.

Run alone: ``python benchmarks/native_workloads/numpy_arrays.py`` prints the elapsed seconds.
"""

from __future__ import annotations

import time

import numpy as np

PARAMS = {"n": 2_000, "rounds": 3}
QUICK_PARAMS = {"n": 200, "rounds": 1}


def main(n: int = PARAMS["n"], rounds: int = PARAMS["rounds"]) -> float:
    rng = np.random.default_rng(0)
    total = 0.0
    for _ in range(rounds):
        a = rng.standard_normal((n, n))
        b = rng.standard_normal((n, n))
        product = a @ b
        ordered = np.sort(product, axis=1)
        stacked = np.concatenate([a, b, product])
        spectrum = np.fft.rfft(ordered, axis=0)
        total += float(stacked.mean() + np.abs(spectrum).max())
        del a, b, product, ordered, stacked, spectrum
    return total


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"numpy_arrays: {time.perf_counter() - start:.3f} s")
