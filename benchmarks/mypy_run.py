"""A real program under ``memtape run``: mypy (mypyc-compiled) type-checking a package.

Runs, interleaved and ``--runs`` times each: mypy untraced, under ``memtape run`` (the
Python heap and the native heap, with the end-of-run summary), under ``memtape run -q``
(no summary), and under ``memray run --trace-python-allocators`` (every Python object, as
memtape records them) when memray is installed. Prints the median and
range of wall seconds, the median CPU seconds (all threads) and the ratio of the medians
over untraced, and each configuration's median peak RSS (the child's own, from ``wait4``).

    python3 benchmarks/mypy_run.py --python .venv-3.11/bin/python --target python/memtape

Needs mypy from its mypyc-compiled wheel in the measured interpreter; the target is any
package mypy can check (``--strict``, no cache, so every run does the same work).
``--json PATH`` also writes every run's ``[wall seconds, CPU seconds]`` per configuration
(``configs``) and every run's peak RSS in MiB (``rss_mib``, in the same order).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile

from mypy_native import measured


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--target", required=True, help="the package mypy checks")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--json", help="also write every run's numbers to this file")
    args = p.parse_args()
    mypy = ["-m", "mypy", "--strict", "--cache-dir=/dev/null", args.target]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "mypy.mtape")
        configs = {
            "untraced": [args.python, *mypy],
            "memtape run": [args.python, "-m", "memtape", "run", "--force", "-o", out, *mypy],
            "memtape run -q": [
                *[args.python, "-m", "memtape", "run", "-q", "--force", "-o", out],
                *mypy,
            ],
        }
        if importlib.util.find_spec("memray") is not None:
            bin_out = os.path.join(tmp, "mypy.bin")
            configs["memray run"] = [
                *[args.python, "-m", "memray", "run", "-f", "-q", "-o", bin_out],
                "--trace-python-allocators",
                *mypy,
            ]
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in configs}
        rss: dict[str, list[float]] = {name: [] for name in configs}
        for _ in range(args.runs):
            for name, cmd in configs.items():
                wall, cpu, peak = measured(cmd)
                times[name].append((wall, cpu))
                rss[name].append(peak)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            numbers = {"target": args.target, "runs": args.runs, "configs": times, "rss_mib": rss}
            json.dump(numbers, f, indent=1)
    base = statistics.median(w for w, _ in times["untraced"])
    print(f"mypy --strict {args.target}, {args.runs} runs each, interleaved")
    head = f"{'config':16} {'median s':>9} {'min-max s':>14} {'cpu s':>7} {'x untraced':>10}"
    print(f"{head} {'peak RSS MiB':>12}")
    for name, samples in times.items():
        walls = [w for w, _ in samples]
        wall = statistics.median(walls)
        cpu = statistics.median(c for _, c in samples)
        spread = f"{min(walls):.2f}-{max(walls):.2f}"
        peak = statistics.median(rss[name])
        print(f"{name:16} {wall:9.2f} {spread:>14} {cpu:7.2f} {wall / base:9.2f}x {peak:12.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
