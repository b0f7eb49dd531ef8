"""How far each tracer is from the floor: the cheapest exact recorders PEP 445 hooks allow.

A tracer that sees every allocation pays, per allocation and per free, at least for the
hook itself, for writing something down, and for reading the stack it attributes the
block to. ``hook_floor/hook_floor.c`` builds exactly that and nothing more (no interning,
no live table, nothing ever read back), in steps; this script compiles it with the
interpreter's own compiler settings, then measures a reduced alloc_heavy in one process,
alternating, untraced and under each step, memtape's recorders and the peers (the stdlib's
tracemalloc, memray's Tracker when installed), each paired with the untraced run of its
round (the order reversed every other round).

    .venv-3.11/bin/python benchmarks/hook_floor.py --runs 12
    python3 benchmarks/hook_floor.py --python .venv-3.11/bin/python --runs 12   # the same

The steps (``floor:`` rows): the hooks forwarding only; a 32-byte record per event into
a ring that fits the L2 cache (16 Ki records, 512 KiB) and into one that does not (1 Mi
records, 32 MiB); the innermost frame's code object and instruction added; every frame of
the chain up to 25; and a spin lock around the record. The chain with the lock is what an
exact recorder of the stack at nframe 25 cannot do without; memtape.tracemalloc adds the
live table (its traces) and the stacks' interning on top.

Ratios are in process (the workload's ``main`` alone) and so read higher than run.py's,
whose processes also spend time outside it. CPython 3.11 and 3.12 only (the C file reads
their frame layout). ``--json PATH`` writes every run's seconds.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import shlex
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "hook_floor" / "hook_floor.c"
sys.path.insert(0, str(HERE / "workloads"))
sys.path.insert(0, str(HERE))

import alloc_heavy  # noqa: E402
import tracers  # noqa: E402

#: log2 of the ring's records: one that fits the L2 cache, one that does not.
RING_IN_CACHE, RING_BEYOND_CACHE = 14, 20
#: (row, mode, log2 of the ring's records); the modes are hook_floor.c's.
FLOOR_STEPS = (
    ("floor: hooks only", -1, RING_IN_CACHE),
    ("floor: + record, 512 KiB ring", 0, RING_IN_CACHE),
    ("floor: + record, 32 MiB ring", 0, RING_BEYOND_CACHE),
    ("floor: + innermost frame", 1, RING_IN_CACHE),
    ("floor: + chain (25 frames)", 2, RING_IN_CACHE),
    ("floor: + chain + lock", 3, RING_IN_CACHE),
)
#: The real tracers, as benchmarks/tracers.py names them.
TRACERS = (
    "memtape1",
    "memtape25",
    "memtape-capture",
    "memtape-events",
    "tracemalloc1",
    "memray",
)


def build(out_dir: Path) -> ModuleType:
    """Compiles hook_floor.c for this interpreter and imports it."""
    if not (3, 11) <= sys.version_info[:2] <= (3, 12):
        raise SystemExit("hook_floor.py: CPython 3.11 or 3.12 only (the C file's frame layout)")
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    target = out_dir / f"hook_floor{suffix}"
    cc = shlex.split(sysconfig.get_config_var("CC") or "cc")
    include = sysconfig.get_paths()["include"]
    command = [*cc, "-O2", "-fPIC", "-shared", f"-I{include}", str(SOURCE), "-o", str(target)]
    subprocess.run(command, check=True)
    spec = importlib.util.spec_from_file_location("hook_floor", target)
    if spec is None or spec.loader is None:
        raise SystemExit(f"hook_floor.py: cannot load {target}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


Starter = Callable[[], Callable[[], object]]


def floor_starter(floor: ModuleType, mode: int, log2_records: int) -> Starter:
    def start() -> Callable[[], object]:
        floor.install(mode, log2_records)
        return floor.uninstall

    return start


def tracer_starter(name: str, scratch: str) -> Starter | None:
    """Starts the named tracer in this process; None when it is not installed."""
    config = tracers.TracerConfig.parse(name)
    try:
        tracers.version_of(config)
    except tracers.TracerUnavailable as exc:
        print(f"{name}: not measured ({exc})", file=sys.stderr)
        return None

    def start() -> Callable[[], object]:
        return tracers.start(config, scratch).stop

    return start


def timed(start: Starter | None, rows: int) -> tuple[float, object]:
    """The workload's seconds under `start`'s tracer, and what stopping it returned (a
    floor step: the records it wrote)."""
    gc.collect()
    stop = start() if start is not None else None
    t0 = time.perf_counter()
    alloc_heavy.main(rows=rows, rounds=1)
    elapsed = time.perf_counter() - t0
    return elapsed, stop() if stop is not None else None


def summary(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.3f}"
    q = statistics.quantiles(values, n=4)
    return f"{q[1]:.3f} ({q[0]:.3f}-{q[2]:.3f})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--runs", type=int, default=12, help="rounds (default 12)")
    p.add_argument("--rows", type=int, default=100_000, help="alloc_heavy rows (one round)")
    p.add_argument("--json", help="also write every run's seconds to this file")
    p.add_argument(
        "--python",
        default=sys.executable,
        help="the interpreter measured (this script runs again under it; default this one)",
    )
    args = p.parse_args()
    if os.path.abspath(args.python) != os.path.abspath(sys.executable):
        again = [args.python, __file__, "--runs", str(args.runs), "--rows", str(args.rows)]
        again += ["--json", os.path.abspath(args.json)] if args.json else []
        return subprocess.run(again, check=False).returncode
    with tempfile.TemporaryDirectory() as scratch:
        floor = build(Path(scratch))
        starters: dict[str, Starter | None] = {"untraced": None}
        for row, mode, log2_records in FLOOR_STEPS:
            starters[row] = floor_starter(floor, mode, log2_records)
        for name in TRACERS:
            start = tracer_starter(name, scratch)
            if start is not None:
                starters[name] = start
        names = list(starters)
        seconds: dict[str, list[float]] = {name: [] for name in names}
        stopped: dict[str, object] = {}
        for i in range(args.runs):
            for name in names if i % 2 == 0 else names[::-1]:
                elapsed, stopped[name] = timed(starters[name], args.rows)
                seconds[name].append(elapsed)
    untraced = seconds["untraced"]
    print(
        f"alloc_heavy rows={args.rows}, one round, {args.runs} rounds in one process; "
        f"CPython {sys.version.split()[0]}; untraced median {statistics.median(untraced):.4f} s"
    )
    print(f"{'configuration':32} x untraced: median (quartiles) of the rounds")
    for name in names[1:]:
        ratios = [t / u for u, t in zip(untraced, seconds[name], strict=True)]
        written = stopped[name]
        records = f"   {written:,} records a run" if isinstance(written, int) else ""
        print(f"{name:32} {summary(ratios)}{records}")
    if args.json:
        meta = {"rows": args.rows, "runs": args.runs, "python": sys.version.split()[0]}
        Path(args.json).write_text(json.dumps({"meta": meta, "seconds": seconds}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
