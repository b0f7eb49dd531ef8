"""``memtape attach`` beside ``memray attach`` on the same running target, interleaved:
how long until recording runs, how long the target is held, and what tracing costs it
afterwards.

The target (written to a temporary file) is a loop that builds a few small lists and
strings an iteration (about 60 allocations) and stamps each iteration with
``time.monotonic()`` (CLOCK_MONOTONIC, the clock this script reads too). For each run a
fresh target starts untraced; after ``--warm`` seconds the attach command runs (no
``--duration``: both tools record until the target exits), and the target ends
``--after`` seconds after the command returned. Then, from the target's stamps:

- **command s**: from starting the attach command to its return, when recording runs
  (memtape: its own wait for the target's first event; memray: its injection done);
- **held ms**: the longest gap between two iterations from the command's start to one
  second after its return, less the median gap before the attach (the time the target
  could not run its own code: stopped by the debugger, or running the tool's start-up);
- **x before**: the target's iterations per second before the attach over those in the
  ``--after`` window (from 0.5 s after the command returned), i.e. the slowdown tracing
  costs once it runs.

Configs: ``memtape`` (``memtape attach``: Python heap and native allocations) and
``memray`` (``memray attach --trace-python-allocators``, the same memory), both through
the route each picks for the version (3.11-3.13: gdb; 3.14+: PEP 768 where the CLI's
Python is the target's). Medians over ``--runs`` rounds, configs alternating.

    python3 benchmarks/attach_compare.py --python .venv-3.11/bin/python --runs 3
    bash scripts/sid_root.sh run .venv-3.14/bin/python benchmarks/attach_compare.py \\
        --python .venv-3.14/bin/python --runs 3

Needs gdb (3.11-3.13) and memray in the measured interpreter.
"""

from __future__ import annotations

import argparse
import array
import itertools
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CONFIGS = ("memtape", "memray")

TARGET = """
import array, sys, time

stamps = array.array("d", bytes(8 * 4_000_000))
end_file, out_file = sys.argv[1], sys.argv[2]
print("ready", flush=True)
n = 0
keep = []
while True:
    rows = [str(i) * 3 for i in range(40)]
    table = {{r: len(r) for r in rows[:10]}}
    keep.append((rows[-1], table))
    if len(keep) > 1000:
        del keep[:500]
    stamps[n] = time.monotonic()
    n += 1
    if n % 256 == 0:
        try:
            with open(end_file) as f:
                end = float(f.read() or "inf")
        except (OSError, ValueError):
            end = float("inf")
        if time.monotonic() >= end or n >= len(stamps) - 256:
            break
with open(out_file, "wb") as f:
    stamps[:n].tofile(f)
"""


@dataclass
class Row:
    """One config's measurements, a value per run."""

    command_s: list[float] = field(default_factory=list)
    held_ms: list[float] = field(default_factory=list)
    slowdown: list[float] = field(default_factory=list)


def attach_command(python: str, config: str, pid: int, out: str, remote_exec: bool) -> list[str]:
    """The attach command line of ``config``. memray's route is named: its ``auto`` hung
    for minutes or refused ("does not seem to be running Python 3.7 or newer") now and then
    on 3.11 here, while ``gdb`` worked each time."""
    if config == "memtape":
        return [python, "-m", "memtape", "attach", "--force", "-o", out, str(pid)]
    method = "sys.remote_exec" if remote_exec else "gdb"
    return [
        python,
        "-m",
        "memray",
        "attach",
        "--method",
        method,
        "-f",
        "--trace-python-allocators",
        "-o",
        out,
        str(pid),
    ]


def rate(stamps: array.array[float], start: float, end: float) -> float:
    """Iterations per second stamped in ``[start, end)``."""
    count = sum(1 for t in stamps if start <= t < end)
    return count / (end - start)


@dataclass(frozen=True)
class Setting:
    """What every run shares: the interpreter, the timing and the scratch directory."""

    python: str
    warm: float
    after: float
    work: Path
    remote_exec: bool


def one_run(config: str, setting: Setting) -> tuple[float, float, float]:
    """``(command s, held ms, slowdown)`` of one attach to a fresh target."""
    python, warm, after, work = setting.python, setting.warm, setting.after, setting.work
    script = work / "target.py"
    script.write_text(TARGET.format())
    end_file, out_file = work / "end", work / "stamps"
    for p in (end_file, out_file):
        p.unlink(missing_ok=True)
    capture = str(work / f"{config}.capture")
    target = subprocess.Popen(
        [python, str(script), str(end_file), str(out_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert target.stdout is not None
        if target.stdout.readline().strip() != "ready":
            raise SystemExit(f"the target did not start: {target.stderr and target.stderr.read()}")
        time.sleep(warm)
        t0 = time.monotonic()
        done = subprocess.run(
            attach_command(python, config, target.pid, capture, setting.remote_exec),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        t1 = time.monotonic()
        if done.returncode != 0:
            raise SystemExit(f"{config} attach failed ({done.returncode}): {done.stderr.strip()}")
        end_file.write_text(str(t1 + after))
        code = target.wait(timeout=after + 120)
        if code != 0:
            err = target.stderr.read() if target.stderr else ""
            raise SystemExit(f"the target failed under {config} ({code}): {err}")
    finally:
        if target.poll() is None:
            target.kill()
            target.wait()
    stamps = array.array("d")
    with open(out_file, "rb") as f:
        stamps.frombytes(f.read())
    before = [b - a for a, b in itertools.pairwise(stamps) if b < t0]
    typical = statistics.median(before)
    around = [b - a for a, b in itertools.pairwise(stamps) if b >= t0 and a <= t1 + 1.0]
    held = max(around, default=typical) - typical
    first = stamps[0]
    slowdown = rate(stamps, first + 0.5, t0) / rate(stamps, t1 + 0.5, t1 + after)
    return t1 - t0, held * 1e3, slowdown


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument(
        "--python", default=sys.executable, help="the interpreter of the target and of both CLIs"
    )
    p.add_argument("--runs", type=int, default=3)
    p.add_argument(
        "--warm", type=float, default=2.0, help="seconds the target runs before the attach"
    )
    p.add_argument(
        "--after", type=float, default=3.0, help="seconds it runs after the attach returned"
    )
    p.add_argument("--configs", default=",".join(CONFIGS))
    args = p.parse_args()
    configs = args.configs.split(",")
    version = subprocess.run(
        [args.python, "-c", "import sys; print(sys.version.split()[0])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    remote_exec = tuple(int(x) for x in version.split(".")[:2]) >= (3, 14)
    rows = {c: Row() for c in configs}
    with tempfile.TemporaryDirectory(prefix="memtape-attach-bench-") as tmp:
        setting = Setting(args.python, args.warm, args.after, Path(tmp), remote_exec)
        for _ in range(args.runs):
            for config in configs:
                command_s, held_ms, slowdown = one_run(config, setting)
                row = rows[config]
                row.command_s.append(command_s)
                row.held_ms.append(held_ms)
                row.slowdown.append(slowdown)
    print(f"attach to a running target, CPython {version}, medians of {args.runs} (min-max)")
    print(f"{'config':10} {'command s':>18} {'held ms':>20} {'x before':>18}")
    for config, row in rows.items():
        cells = []
        for values, fmt in (
            (row.command_s, "{:.2f}"),
            (row.held_ms, "{:.0f}"),
            (row.slowdown, "{:.2f}x"),
        ):
            med, lo, hi = (
                fmt.format(v) for v in (statistics.median(values), min(values), max(values))
            )
            cells.append(f"{med} ({lo}-{hi})")
        print(f"{config:10} {cells[0]:>18} {cells[1]:>20} {cells[2]:>18}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
