"""``memtape run --native`` on mypy (compiled with mypyc) type-checking a real package:
are mypyc's native functions in ``top`` and in the flame graph, and what does it cost?

Runs mypy untraced, under ``memtape run``, ``memtape run --native`` and, when memray is
installed, ``memray run --native --trace-python-allocators`` (one run each, CPU seconds
of each child), then reads the ``--native`` capture: the share of the peak whose
innermost frame is a function of a mypyc-compiled module, the top rows, and the flame
graph's frames from those modules.

    python3 benchmarks/mypy_native.py --python .venv-3.11/bin/python --target python/memtape

Needs mypy from its mypyc-compiled wheel in the measured interpreter
(``PYTHON -m pip install mypy``); the target is any package mypy can check.
``--json PATH`` also writes each configuration's ``[wall seconds, CPU seconds]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def timed(cmd: list[str]) -> tuple[float, float]:
    """``(wall seconds, CPU seconds)`` of one child; fails loudly on a crash."""
    wall, cpu, _ = measured(cmd)
    return wall, cpu


def measured(cmd: list[str]) -> tuple[float, float, float]:
    """``(wall seconds, CPU seconds, peak RSS MiB)`` of one child (its own peak, from
    ``wait4``); fails loudly on a crash."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if code not in (0, 1):  # mypy exits 1 when it finds type errors
        raise SystemExit(f"{' '.join(cmd)} failed ({code}):\n{err}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def is_mypyc(filename: str) -> bool:
    """Whether a frame's file is a mypyc-compiled module of mypy."""
    return filename.endswith(".so") and ("__mypyc" in filename or "/mypy/" in filename)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--target", required=True, help="the package mypy checks")
    p.add_argument("--json", help="also write the configurations' times to this file")
    args = p.parse_args()
    mypy = ["-m", "mypy", "--cache-dir=/dev/null", "--strict", args.target]
    py = args.python
    with tempfile.TemporaryDirectory() as scratch:
        native = os.path.join(scratch, "native.mtape")
        runs = {
            "untraced": [py, *mypy],
            "memtape": [py, "-m", "memtape", "run", "-q", "-o", f"{scratch}/h.mtape", *mypy],
            "memtape --native": [py, "-m", "memtape", "run", "-q", "--native", "-o", native, *mypy],
        }
        has_memray = subprocess.run(
            [py, "-c", "import memray"], capture_output=True, check=False
        ).returncode
        if has_memray == 0:
            runs["memray --native"] = [
                *[py, "-m", "memray", "run", "-q", "--native", "--trace-python-allocators"],
                *["-o", f"{scratch}/memray.bin", *mypy],
            ]
        times = {name: timed(cmd) for name, cmd in runs.items()}
        top = json.loads(
            subprocess.run(
                [py, "-m", "memtape", "top", "--json", "--limit", "100000", native],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )
        folded_path = os.path.join(scratch, "folded.txt")
        subprocess.run(
            [py, "-m", "memtape", "flamegraph", "--folded", "-o", folded_path, native],
            check=True,
            capture_output=True,
        )
        with open(folded_path, encoding="utf-8") as f:
            folded = f.read().splitlines()
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"target": args.target, "configs": times}, f, indent=1)
    base = times["untraced"][1]
    print(f"mypy --strict {args.target}, one run each")
    print(f"{'config':<18} {'wall s':>7} {'cpu s':>7} {'x untraced (cpu)':>17}")
    for name, (wall, cpu) in times.items():
        print(f"{name:<18} {wall:>7.1f} {cpu:>7.1f} {cpu / base:>17.2f}")
    rows = top["sites"]
    total = sum(r["bytes"] for r in rows)
    native_rows = [r for r in rows if r["frames"] and is_mypyc(r["frames"][0]["filename"])]
    share = sum(r["bytes"] for r in native_rows) / total if total else 0.0
    print(f"\npeak sites whose innermost frame is a mypyc function: {share:.1%} of the peak")
    for r in rows[:10]:
        frame = r["frames"][0] if r["frames"] else {"function": "?", "filename": "?"}
        print(f"{r['bytes'] / 2**20:8.1f} MiB  {frame['function']}  ({frame['filename']})")
    mypyc_lines = sum(1 for line in folded if ".so:" in line and "CPyDef_" in line)
    print(f"\nflame graph stacks through a mypyc function: {mypyc_lines} of {len(folded)}")
    return 0 if native_rows and mypyc_lines else 1


if __name__ == "__main__":
    raise SystemExit(main())
