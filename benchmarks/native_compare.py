"""Whole-program comparison of native-memory tracing: ``memtape run`` (Python heap and
native, the default), ``memtape run --no-native-heap``, ``memtape run --native`` (native
stacks too), ``memray run --trace-python-allocators`` and ``memray run --native
--trace-python-allocators``, beside an untraced run, on one workload script, interleaved
round-robin in the same session. These ``memtape`` configurations run with ``-q``; the
``memtape-summary`` configuration (not in the default set) is plain ``memtape run``, with
the end-of-run summary and the analysis behind it, for its peak RSS.

Each run is a fresh process, timed from start to exit (start-up, imports and the capture's
finishing included: what a user waits for). Also reported: the child's peak RSS
(``wait4``), and the peak each tool itself reports for its capture (``memtape stats
--json``: ``peak.bytes`` and its split by source; ``memray stats --json``:
``metadata.peak_memory``).

    python3 benchmarks/native_compare.py --python .venv-3.11/bin/python \\
        --script benchmarks/native_workloads/pandas_frames.py --runs 5

``--json PATH`` also writes every run's numbers (per configuration: wall and CPU seconds,
peak RSS MiB, the reported peak bytes and memtape's split by source).

Needs memray in the measured interpreter (``PYTHON -m pip install memray``).
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
from dataclasses import asdict, dataclass, field

CONFIGS = (
    "untraced",
    "memtape-heap",
    "memtape",
    "memtape-native",
    "memray",
    "memray-native",
)


@dataclass
class Row:
    """The measurements of one configuration."""

    wall_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    rss_mib: list[float] = field(default_factory=list)
    peaks: list[int] = field(default_factory=list)
    by_source: dict[str, int] = field(default_factory=dict)


def command(python: str, config: str, script: str, out: str) -> list[str]:
    """The command line of one run."""
    memtape = [python, "-m", "memtape", "run", "-q", "--force", "-o", out]
    memray = [python, "-m", "memray", "run", "-q", "-f", "--trace-python-allocators", "-o", out]
    return {
        "untraced": [python, script],
        "memtape-heap": [*memtape, "--no-native-heap", script],
        "memtape": [*memtape, script],
        "memtape-summary": [python, "-m", "memtape", "run", "--force", "-o", out, script],
        "memtape-native": [*memtape, "--native", script],
        "memray": [*memray, script],
        "memray-native": [*memray, "--native", script],
    }[config]


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """``(wall seconds, CPU seconds, peak RSS MiB)`` of one child; fails loudly on a
    crash. CPU seconds (user + system) stay meaningful on a loaded machine."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def reported_peak(python: str, config: str, out: str, scratch: str) -> tuple[int, dict[str, int]]:
    """The peak the tool reports for its capture, and memtape's split by source."""
    if config.startswith("memtape"):
        text = subprocess.run(
            [python, "-m", "memtape", "stats", "--json", out],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        peak = json.loads(text)["peak"]
        return int(peak["bytes"]), dict(peak["by_source"])
    stats = os.path.join(scratch, "memray-stats.json")
    subprocess.run(
        [python, "-m", "memray", "stats", "--json", "-f", "-o", stats, out],
        check=True,
        capture_output=True,
    )
    with open(stats, encoding="utf-8") as f:
        return int(json.load(f)["metadata"]["peak_memory"]), {}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--script", required=True)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument(
        "--configs",
        default=",".join(CONFIGS),
        help="comma-separated, of the default and memtape-summary (default: %(default)s)",
    )
    p.add_argument("--json", help="also write every run's numbers to this file")
    args = p.parse_args()
    configs = args.configs.split(",")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONHASHSEED"] = "0"
    rows = {c: Row() for c in configs}
    with tempfile.TemporaryDirectory() as scratch:
        timed([args.python, args.script], env)  # warm-up: caches, the workload's own files
        for _ in range(args.runs):
            for config in configs:
                out = os.path.join(scratch, f"{config}.capture")
                wall, cpu, rss = timed(command(args.python, config, args.script, out), env)
                row = rows[config]
                row.wall_s.append(wall)
                row.cpu_s.append(cpu)
                row.rss_mib.append(rss)
                if config != "untraced":
                    peak, split = reported_peak(args.python, config, out, scratch)
                    row.peaks.append(peak)
                    row.by_source = split
    base = statistics.median(rows["untraced"].cpu_s) if "untraced" in rows else None
    print(f"{os.path.basename(args.script)}, {args.runs} runs each, interleaved")
    print(
        f"{'config':<14} {'wall s':>7} {'cpu s':>6} {'x untraced (cpu)':>16} {'RSS MiB':>8} "
        f"{'reported peak MiB':>18}  by source at the peak (MiB)"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "script": args.script,
                    "runs": args.runs,
                    "configs": {config: asdict(row) for config, row in rows.items()},
                },
                f,
                indent=1,
            )
    for config, row in rows.items():
        cpu = statistics.median(row.cpu_s)
        ratio = f"{cpu / base:.2f}" if base else "-"
        shown_peak = f"{statistics.median(row.peaks) / 2**20:.1f}" if row.peaks else "-"
        shown_split = ", ".join(f"{k} {v / 2**20:.1f}" for k, v in row.by_source.items())
        print(
            f"{config:<14} {statistics.median(row.wall_s):>7.2f} {cpu:>6.2f} {ratio:>16} "
            f"{statistics.median(row.rss_mib):>8.1f} {shown_peak:>18}  {shown_split}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
