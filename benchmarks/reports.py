"""Capture size and report speed, memtape beside memray, on one recording each of the
allocation-heavy workload (every Python allocator event traced).

For each tool: record the workload once (memtape run / memray run
--trace-python-allocators), then time `stats` and the flame graph N times (fresh
process each), reporting median wall seconds and peak RSS (max over runs).

Usage: python benchmarks/reports.py --python .venv-3.11/bin/python [--runs 3] [--json P]

``--script`` records another script instead of the workload (results_page.py --quick
records a small one).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "workloads" / "alloc_heavy.py"

MEASURE = (
    "import resource, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
    "dt = time.perf_counter() - t\n"
    "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "print(dt, rss, p.returncode)\n"
    "sys.stderr.write(p.stderr.decode(errors='replace')[-2000:])\n"
)


def measure(cmd: list[str], python: str) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of one command, in a fresh measuring process."""
    out = subprocess.run(
        [python, "-c", MEASURE, *cmd], capture_output=True, text=True, timeout=900, check=True
    )
    seconds, rss_kib, code = out.stdout.split()
    if int(code) != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({code}): {out.stderr}")
    return float(seconds), int(rss_kib) / 1024


def record(python: str, tool: str, path: Path, script: Path) -> float:
    if tool == "memtape":
        cmd = [python, "-m", "memtape", "run", "--quiet", "-o", str(path), str(script)]
    else:
        cmd = [python, "-m", "memray", "run", "--trace-python-allocators", "-q", "-f"]
        cmd += ["-o", str(path), str(script)]
    t = time.perf_counter()
    subprocess.run(cmd, check=True, timeout=1800, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def commands(python: str, tool: str, path: Path, out: Path) -> dict[str, list[str]]:
    if tool == "memtape":
        base = [python, "-m", "memtape"]
        return {
            "stats": [*base, "stats", str(path)],
            "flamegraph": [*base, "flamegraph", str(path), "-o", str(out), "--force"],
        }
    base = [python, "-m", "memray"]
    return {
        "stats": [*base, "stats", str(path)],
        "flamegraph": [*base, "flamegraph", "-f", "-o", str(out), str(path)],
    }


def memtape_events(python: str, path: Path) -> int:
    code = f"import memtape._native as n; print(n.analyze_capture({str(path)!r}).events)"
    return int(
        subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--script", type=Path, default=WORKLOAD, help="what to record")
    args = p.parse_args()
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for tool in ("memtape", "memray"):
            capture = Path(tmp) / ("run.mtape" if tool == "memtape" else "run.bin")
            if (
                tool == "memray"
                and subprocess.run(
                    [args.python, "-c", "import memray"], check=False, capture_output=True
                ).returncode
            ):
                print("memray is not installed in --python; skipping its rows", file=sys.stderr)
                continue
            row: dict[str, float] = {"record_s": record(args.python, tool, capture, args.script)}
            row["capture_mib"] = os.path.getsize(capture) / 2**20
            if tool == "memtape":
                row["events"] = memtape_events(args.python, capture)
                row["bytes_per_event"] = os.path.getsize(capture) / row["events"]
            for name, cmd in commands(args.python, tool, capture, Path(tmp) / "f.html").items():
                runs = [measure(cmd, args.python) for _ in range(args.runs)]
                row[f"{name}_s"] = statistics.median(r[0] for r in runs)
                row[f"{name}_rss_mib"] = max(r[1] for r in runs)
            results[tool] = row
            shutil.rmtree(Path(tmp) / "f.html", ignore_errors=True)
    print(
        f"{'tool':<8} {'events':>11} {'capture MiB':>12} {'B/event':>8} "
        f"{'stats s':>8} {'stats MiB':>10} {'flame s':>8} {'flame MiB':>10}"
    )
    for tool, r in results.items():
        events = f"{int(r['events']):,}" if "events" in r else "-"
        per = f"{r['bytes_per_event']:.2f}" if "bytes_per_event" in r else "-"
        print(
            f"{tool:<8} {events:>11} {r['capture_mib']:>12.1f} {per:>8} "
            f"{r['stats_s']:>8.2f} {r['stats_rss_mib']:>10.0f} "
            f"{r['flamegraph_s']:>8.2f} {r['flamegraph_rss_mib']:>10.0f}"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
