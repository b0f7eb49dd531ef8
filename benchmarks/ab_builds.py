"""Two or more builds of memtape's extension measured in one interpreter, alternated.

On a shared host whose speed drifts by 2x within minutes, separate processes measured
minutes apart cannot tell a 3 % change from the drift. This loads each build's
``_native`` module under its own name, then runs a reduced alloc_heavy untraced and
under each build in turn (the builds' order reversed every other round), and prints
each build's time paired with the untraced run just before it, and each build paired
with the first: medians and quartiles of the per-round ratios.

Build the extension, copy ``python/memtape/_native.*.so`` aside, change and build again;
then for example:

    .venv-3.11/bin/python benchmarks/ab_builds.py --runs 40 old=/tmp/old.so \
        new=python/memtape/_native.cpython-311-x86_64-linux-gnu.so

``--mode events`` (default) records events as the ``memtape-events`` config does
(100,000 entries, the Python heap); ``--mode native-stacks`` records the same events
with each one's native stack unwound (as ``memtape run --native``); ``--mode
tracemalloc25`` traces at 25 frames; ``--mode capture`` records into a capture file as
the ``memtape-capture`` config does (``memtape run --no-native-heap``'s recording).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parent / "workloads"))

import alloc_heavy

CAPTURE_PATH = os.path.join(tempfile.gettempdir(), f"memtape-ab-{os.getpid()}.mtape")


def load(name: str, path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"{name}._native", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(native: ModuleType | None, mode: str, rows: int) -> float:
    gc.collect()
    if native is not None:
        if mode == "events":
            native.record_memory_events(True, 100_000, 0, True, False, 64)
        elif mode == "native-stacks":
            native.record_memory_events(True, 100_000, 0, True, False, 64, False, True)
        elif mode == "capture":
            native._start_capture(CAPTURE_PATH, '{"tool": "memtape", "nframe": 64}', 0, False)
        else:
            native.start(25)
    start = time.perf_counter()
    alloc_heavy.main(rows=rows, rounds=1)
    elapsed = time.perf_counter() - start
    if native is not None:
        if mode in ("events", "native-stacks"):
            native.record_memory_events(False, 1, 0, False, False, 1)
        elif mode == "capture":
            native._stop_capture()
            os.unlink(CAPTURE_PATH)
        else:
            native.stop()
    return elapsed


def quartiles(values: list[float]) -> str:
    q = statistics.quantiles(values, n=4)
    return f"median {q[1]:.3f} (quartiles {q[0]:.3f}-{q[2]:.3f})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("builds", nargs="+", help="NAME=PATH of a built _native module")
    p.add_argument("--runs", type=int, default=40)
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument(
        "--mode",
        choices=("events", "native-stacks", "tracemalloc25", "capture"),
        default="events",
    )
    args = p.parse_args()
    builds = {name: load(name, path) for name, path in (b.split("=", 1) for b in args.builds)}
    names = list(builds)
    times: dict[str, list[float]] = {"untraced": [], **{n: [] for n in names}}
    for i in range(args.runs):
        times["untraced"].append(run(None, args.mode, args.rows))
        for name in names if i % 2 == 0 else names[::-1]:
            times[name].append(run(builds[name], args.mode, args.rows))
    print(f"alloc_heavy rows={args.rows}, {args.mode}, {args.runs} rounds")
    print(f"untraced: median {statistics.median(times['untraced']):.4f} s")
    for name in names:
        paired = [b / a for a, b in zip(times["untraced"], times[name], strict=True)]
        print(f"{name} / untraced: {quartiles(paired)}")
    for name in names[1:]:
        paired = [b / a for a, b in zip(times[names[0]], times[name], strict=True)]
        print(f"{name} / {names[0]}: {quartiles(paired)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
