"""Deep-stack workload: small-object allocations made 100 to 200 frames below main().

Each repeat recurses to a depth between 100 and 200 and there builds a list of `width`
entries, each a tuple holding an int, a str and a one-item list, then drops it on the
way back up: about 10 M small allocations (tuples, str, lists, ints) and as many frees,
about 0.5 s untraced on a 2-core VM with CPython 3.11. A tracer that walks the whole
stack on every allocation (stdlib tracemalloc does, even at nframe=1, to fill in
total_nframe) pays for the depth.

Run alone: ``python benchmarks/workloads/deep_recursion.py`` prints the elapsed seconds.
"""

from __future__ import annotations

import time

PARAMS = {"repeats": 2_500, "width": 1_000, "min_depth": 100, "max_depth": 200}
QUICK_PARAMS = {"repeats": 20, "width": 200, "min_depth": 100, "max_depth": 200}


def build_at_depth(depth: int, width: int) -> list[tuple[int, str, list[int]]]:
    if depth:
        return build_at_depth(depth - 1, width)
    out = []
    for i in range(width):
        out.append((i, str(i), [i]))
    return out


def main(
    repeats: int = PARAMS["repeats"],
    width: int = PARAMS["width"],
    min_depth: int = PARAMS["min_depth"],
    max_depth: int = PARAMS["max_depth"],
) -> int:
    span = max_depth - min_depth + 1
    built = 0
    for r in range(repeats):
        # A fixed, scattered sequence of depths, the same on every run.
        built += len(build_at_depth(min_depth + (r * 37) % span, width))
    return built


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"deep_recursion: {time.perf_counter() - start:.3f} s")
