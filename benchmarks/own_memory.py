"""What each tracer adds to a program's peak RSS (issue 32: memtape's own memory at most
memray's): the untraced script, ``memtape run`` (the default, with its end-of-run
summary), ``memtape run -q`` and ``memray run --trace-python-allocators``, interleaved
round-robin, each a fresh process.

Per configuration: the traced process' peak RSS (``wait4``'s ``ru_maxrss``, the median of
the runs) and what it adds over the untraced median; for memtape, its own heap at its
peak as the capture's trailer records it (``memtape stats --json``: ``rss.
memtape_own_bytes``), and for ``memtape run`` the peak RSS of the summary process that
analyzes the capture beside it (read from ``/proc`` while it runs: memory the machine
spends, not the program).

    python3 benchmarks/own_memory.py --python .venv-3.11/bin/python --runs 3 \\
        benchmarks/workloads/alloc_heavy.py
    python3 benchmarks/own_memory.py --python .venv-3.11/bin/python --runs 3 \\
        -- -m mypy --strict --cache-dir=/dev/null python/memtape

The program is given as to ``python`` (a script or ``-m module``, with its arguments).

Needs memray in the measured interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIGS = ("untraced", "memtape run", "memtape run -q", "memray")
MiB = 2**20


def command(python: str, config: str, program: list[str], out: str) -> list[str]:
    memtape = [python, "-m", "memtape", "run", "--force", "-o", out]
    memray = [python, "-m", "memray", "run", "-q", "-f", "--trace-python-allocators", "-o", out]
    return {
        "untraced": [python, *program],
        "memtape run": [*memtape, *program],
        "memtape run -q": [*memtape, "-q", *program],
        "memray": [*memray, *program],
    }[config]


def helper_peak(tag: bytes) -> int:
    """The largest ``VmHWM`` (bytes) of a process whose command line holds ``tag``."""
    peak = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if tag not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]) * 1024)
        except (OSError, ValueError):
            continue
    return peak


def run_once(cmd: list[str]) -> tuple[int, int]:
    """Runs ``cmd``; its peak RSS and its summary process' (0 if none), in bytes."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tag = f"memtape-run-summary-of-{proc.pid}".encode()
    helper = 0
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        helper = max(helper, helper_peak(tag))
        time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited with {proc.returncode}")
    return usage.ru_maxrss * 1024, helper


def own_bytes(python: str, capture: str) -> int:
    stats = [python, "-m", "memtape", "stats", "--json", capture]
    done = subprocess.run(stats, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"memtape stats {capture}: exit {done.returncode}\n{done.stderr}")
    return int(json.loads(done.stdout)["rss"]["memtape_own_bytes"])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("program", nargs=argparse.REMAINDER, help="a script or -m module, and args")
    args = p.parse_args()
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    program = program or [str(Path(__file__).parent / "workloads/alloc_heavy.py")]
    rss: dict[str, list[int]] = {c: [] for c in CONFIGS}
    own: dict[str, list[int]] = {c: [] for c in CONFIGS}
    helpers: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.runs):
            for config in CONFIGS:
                out = os.path.join(tmp, "capture")
                peak, helper = run_once(command(args.python, config, program, out))
                rss[config].append(peak)
                if config.startswith("memtape"):
                    own[config].append(own_bytes(args.python, out))
                if config == "memtape run":
                    helpers.append(helper)
    base = statistics.median(rss["untraced"])
    print(f"{' '.join(program)}: peak RSS, median of {args.runs} interleaved runs (MiB)")
    print(f"{'config':<16} {'peak RSS':>9} {'added':>7} {'runs':>22} {'memtape own':>12}")
    for config in CONFIGS:
        median = statistics.median(rss[config])
        runs = "-".join(f"{min(rss[config]) / MiB:.1f} {max(rss[config]) / MiB:.1f}".split())
        mine = f"{statistics.median(own[config]) / MiB:.1f}" if own[config] else "-"
        added = "-" if config == "untraced" else f"+{(median - base) / MiB:.1f}"
        print(f"{config:<16} {median / MiB:>9.1f} {added:>7} {runs:>22} {mine:>12}")
    print(
        f"memtape run's summary process: peak RSS {statistics.median(helpers) / MiB:.1f} MiB "
        "(median; its own process, beside the program)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
