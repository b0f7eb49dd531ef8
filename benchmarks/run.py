"""Measures memtape beside stdlib tracemalloc and memray on the workloads in workloads/.

Every run is a fresh `--python` process (single_run.py) that times only the workload body;
runs are interleaved round-robin (run 1 of every configuration, then run 2, ...). Prints one
table per workload and writes the raw numbers as JSON.

On a shared host the neighbours' load comes and goes within seconds to minutes and slows
every process alike (CPU time follows wall time: it is cache and memory contention, not
waiting for the CPU). With `--bracket`, besides each configuration's median over the
untraced median, every traced run is bracketed by untraced runs, the one before and one
extra right after, and divided by their mean: "x bracketed" is the median of those ratios.

    python benchmarks/run.py --python .venv-3.11/bin/python             # everything, 5 runs
    python benchmarks/run.py --only alloc_heavy --configs untraced,memtape1,tracemalloc1
    python benchmarks/run.py --quick --configs untraced,memtape1         # smoke test
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tracers

HERE = Path(__file__).resolve().parent
WORKLOADS_DIR = HERE / "workloads"
SINGLE_RUN = HERE / "single_run.py"
EXIT_UNAVAILABLE = 3
MIB = 1024 * 1024
PROBE_TIMEOUT_S = 120.0
# A 1-minute load average above this before the first run means something else is busy.
BUSY_LOADAVG = 0.5
# A run whose wall time exceeds its CPU time by this factor waited for the CPU: noisy.
STARVED = 1.1


@dataclass
class ConfigResult:
    """All runs of one configuration on one workload."""

    status: str = "ok"  # ok | unavailable | failed
    reason: str = ""
    runs: list[dict[str, Any]] = field(default_factory=list)

    def median(self, key: str) -> float | None:
        values = [run[key] for run in self.runs if run.get(key) is not None]
        return statistics.median(values) if values else None

    def to_json(self) -> dict[str, Any]:
        seconds = [run["seconds"] for run in self.runs]
        summary: dict[str, Any] = {"status": self.status}
        if self.reason:
            summary["reason"] = self.reason
        if seconds:
            summary.update(
                median_s=statistics.median(seconds), min_s=min(seconds), max_s=max(seconds)
            )
        summary["runs"] = self.runs
        return summary


def child_environment() -> dict[str, str]:
    """The environment of every measured process: same for all tracers, no stray tracing."""
    env = dict(os.environ)
    for name in ("PYTHONTRACEMALLOC", "PYTHONMALLOC", "PYTHONDEVMODE", "PYTHONPROFILEIMPORTTIME"):
        env.pop(name, None)
    env["PYTHONHASHSEED"] = "0"
    return env


def run_child(
    python: str, extra: list[str], timeout: float, scratch: str
) -> tuple[str, dict[str, Any]]:
    """Runs single_run.py once; returns (status, result or {'reason': ...})."""
    result_path = Path(scratch) / "result.json"
    result_path.unlink(missing_ok=True)
    command = [python, str(SINGLE_RUN), "--result", str(result_path), "--scratch", scratch, *extra]
    try:
        proc = subprocess.run(
            command,
            env=child_environment(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "failed", {"reason": f"timed out after {timeout:g} s (raise it with --timeout)"}
    except OSError as exc:
        return "failed", {"reason": f"cannot start {python}: {exc}"}
    if proc.returncode in (0, EXIT_UNAVAILABLE) and result_path.exists():
        result = json.loads(result_path.read_text())
        return result.pop("status"), result
    if proc.returncode < 0:
        try:
            how = f"killed by {signal.Signals(-proc.returncode).name}"
        except ValueError:
            how = f"killed by signal {-proc.returncode}"
    else:
        how = f"exit status {proc.returncode}"
    tail = [line for line in proc.stderr.strip().splitlines() if line.strip()][-1:] or ["no output"]
    return "failed", {
        "reason": f"{how}: {tail[0].strip()}",
        "stderr": proc.stderr[-4000:],
    }


def load_workload_params(path: Path, quick: bool) -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location(f"workload_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.QUICK_PARAMS if quick else module.PARAMS)


def format_ratio(numerator: float | None, denominator: float | None) -> str:
    if numerator is None or not denominator:
        return "-"
    return f"{numerator / denominator:.2f}x"


def format_mib(value: float | None, unit_bytes: int = 1) -> str:
    return "-" if value is None else f"{value * unit_bytes / MIB:.1f}"


HEADER = (
    "config",
    "median s",
    "min-max s",
    "cpu s",
    "x untraced",
    "x bracketed",
    "speedup vs stdlib",
    "peak RSS MiB",
    "traced peak MiB",
    "notes",
)


def bracketed_ratio(result: ConfigResult) -> str:
    """The median of each run's time over the mean of the untraced runs around it."""
    ratios = [
        run["seconds"] / statistics.mean(run["untraced_around_s"])
        for run in result.runs
        if run.get("untraced_around_s")
    ]
    return f"{statistics.median(ratios):.2f}x" if ratios else "-"


def table_row(name: str, results: dict[str, ConfigResult], base: float | None) -> tuple[str, ...]:
    result = results[name]
    median = result.median("seconds")
    seconds = [run["seconds"] for run in result.runs]
    peer_name = tracers.TracerConfig.parse(name).stdlib_peer
    peer = results.get(peer_name) if peer_name else None
    notes = []
    starved = sum(run["seconds"] > STARVED * run["cpu_seconds"] for run in result.runs)
    if starved:
        notes.append(f"{starved}/{len(seconds)} runs starved (wall > {STARVED}x cpu)")
    capture_bytes = result.median("capture_bytes")
    if capture_bytes is not None:
        note = f"capture {format_mib(capture_bytes)} MiB"
        events = result.median("capture_events")
        if events:
            note += f" ({capture_bytes / events:.2f} B/event)"
        notes.append(note)
    if result.status == "failed":
        notes.append(f"FAILED after {len(result.runs)} runs: {result.reason}")
    return (
        name,
        f"{median:.3f}",
        f"{min(seconds):.3f}-{max(seconds):.3f}",
        f"{result.median('cpu_seconds'):.3f}",
        format_ratio(median, base),
        bracketed_ratio(result),
        format_ratio(peer.median("seconds") if peer else None, median) if peer_name else "",
        format_mib(result.median("peak_rss_kib"), 1024),
        format_mib(result.median("traced_peak_bytes")),
        "; ".join(notes),
    )


def render_table(results: dict[str, ConfigResult]) -> str:
    untraced = results.get("untraced")
    base = untraced.median("seconds") if untraced else None
    rows = [table_row(name, results, base) for name, result in results.items() if result.runs]
    widths = [max(len(row[i]) for row in [HEADER, *rows]) for i in range(len(HEADER))]
    lines = []
    for row in [HEADER, *rows]:
        cells = [row[0].ljust(widths[0])]
        cells += [cell.rjust(width) for cell, width in zip(row[1:-1], widths[1:-1], strict=True)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    for name, result in results.items():
        if not result.runs:
            label = "unavailable" if result.status == "unavailable" else "FAILED"
            lines.append(f"{name:<14}  {label}: {result.reason}")
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    workloads = sorted(p.stem for p in WORKLOADS_DIR.glob("*.py") if not p.stem.startswith("_"))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="interpreter to measure (has memtape and memray installed); "
        "default: the one running this script",
    )
    parser.add_argument(
        "--runs", type=int, help="runs per configuration (default 5; 1 with --quick)"
    )
    parser.add_argument("--only", help=f"comma-separated workloads (of: {', '.join(workloads)})")
    parser.add_argument(
        "--configs",
        default=",".join(tracers.DEFAULT_CONFIGS),
        help="comma-separated configurations: untraced, tracemalloc<N>, "
        "memtape<N>, memray (default: %(default)s)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small workload sizes and 1 run: a smoke test, not a measurement",
    )
    parser.add_argument(
        "--json",
        type=Path,
        help="where to write raw numbers (default benchmarks/out/run-<time>.json)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=900.0,
        help="seconds one run may take before it counts as failed (default 900)",
    )
    parser.add_argument(
        "--show",
        type=Path,
        metavar="JSON",
        help="print the tables of an earlier run's JSON and exit (measures nothing)",
    )
    parser.add_argument(
        "--bracket",
        action="store_true",
        help="an extra untraced run after each traced one, for 'x bracketed'",
    )
    parser.add_argument(
        "--no-warmup",
        action="store_true",
        help="skip the discarded untraced run before each workload",
    )
    args = parser.parse_args(argv)
    try:
        configs = [tracers.TracerConfig.parse(name) for name in args.configs.split(",") if name]
    except ValueError as exc:
        parser.error(str(exc))
    args.configs = list(dict.fromkeys(config.name for config in configs))
    selected = args.only.split(",") if args.only else workloads
    unknown = sorted(set(selected) - set(workloads))
    if unknown:
        parser.error(
            f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(workloads)}"
        )
    args.workloads = [name for name in workloads if name in selected]
    if args.runs is None:
        args.runs = 1 if args.quick else 5
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    return args


class Runner:
    """Runs every selected workload under every available configuration, round-robin."""

    def __init__(self, args: argparse.Namespace, scratch: str) -> None:
        self.args = args
        self.scratch = scratch
        self.probes: dict[str, dict[str, Any]] = {}
        self.failed = False

    def child(self, extra: list[str], timeout: float) -> tuple[str, dict[str, Any]]:
        return run_child(self.args.python, extra, timeout, self.scratch)

    def probe_tracers(self) -> None:
        """Imports, starts and stops each tracer once, so an unavailable one is named once."""
        print("tracers:", flush=True)
        for name in self.args.configs:
            status, info = self.child(["--probe", "--config", name], PROBE_TIMEOUT_S)
            self.probes[name] = {"status": status, **info}
            self.failed |= status == "failed"
            if status == "ok":
                print(f"  {name:<14} {info['version']}", flush=True)
                continue
            hint = f"\n  {'':<14} fix: {info['hint']}" if "hint" in info else ""
            print(f"  {name:<14} {status}: {info['reason']}{hint}", flush=True)
            if "stderr" in info:
                print(info["stderr"], file=sys.stderr, flush=True)

    def run_workload(self, workload: str) -> dict[str, Any]:
        args = self.args
        path = WORKLOADS_DIR / f"{workload}.py"
        params = load_workload_params(path, args.quick)
        results = {name: ConfigResult() for name in args.configs}
        for name, probe in self.probes.items():
            if probe["status"] != "ok":
                results[name].status, results[name].reason = probe["status"], probe["reason"]
        sizes = ", ".join(f"{key}={value}" for key, value in params.items())
        print(f"\n== {workload}  ({sizes}; {args.runs} run(s) per config, interleaved)", flush=True)
        base = ["--workload", str(path)] + (["--quick"] if args.quick else [])
        if not (args.quick or args.no_warmup):
            self.child([*base, "--config", "untraced"], args.timeout)
        untraced = results.get("untraced")
        bracket = untraced is not None and args.bracket
        for index in range(args.runs):
            before: float | None = None
            for name, result in results.items():
                if result.status != "ok":
                    continue
                label = f"[{index + 1}/{args.runs}] {name:<14}"
                run = self.run_once(result, [*base, "--config", name], label)
                if name == "untraced":
                    before = run["seconds"] if run else None
                    continue
                if not (bracket and run and untraced and untraced.status == "ok"):
                    continue
                after = self.bracket_run([*base, "--config", "untraced"], label)
                if after is not None and before is not None:
                    run["untraced_around_s"] = [before, after]
                before = after
        print(render_table(results), flush=True)
        return {
            "params": params,
            "configs": {name: result.to_json() for name, result in results.items()},
        }

    def bracket_run(self, extra: list[str], after: str) -> float | None:
        """An untraced run that only brackets the traced run before it; its seconds."""
        status, info = self.child(extra, self.args.timeout)
        seconds = info["seconds"] if status == "ok" else None
        shown = f"{seconds:8.3f} s" if seconds is not None else f"{status}: {info['reason']}"
        print(
            f"  {'':6}   (untraced after {after.split()[1]}) {shown}", file=sys.stderr, flush=True
        )
        return seconds

    def run_once(self, result: ConfigResult, extra: list[str], label: str) -> dict[str, Any] | None:
        status, info = self.child(extra, self.args.timeout)
        if status == "ok":
            info["loadavg"] = os.getloadavg()[0]
            result.runs.append(info)
            print(f"  {label} {info['seconds']:8.3f} s", file=sys.stderr, flush=True)
            return info
        result.status, result.reason = status, info["reason"]
        self.failed |= status == "failed"
        print(f"  {label} {status}: {info['reason']}", file=sys.stderr, flush=True)
        if "stderr" in info:
            print(info["stderr"], file=sys.stderr, flush=True)
        return None


def show(path: Path) -> int:
    report = json.loads(path.read_text())
    meta = report["meta"]
    print(f"python: {meta['python']}  ({meta['started']}, {meta['runs']} run(s) per config)")
    for workload, data in report["workloads"].items():
        sizes = ", ".join(f"{key}={value}" for key, value in data["params"].items())
        print(f"\n== {workload}  ({sizes})")
        results = {
            name: ConfigResult(config["status"], config.get("reason", ""), config["runs"])
            for name, config in data["configs"].items()
        }
        print(render_table(results))
    return 0


def exit_on_sigterm(signum: int, frame: object) -> None:
    # SystemExit unwinds through subprocess.run, which kills the measured child on the way.
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    args = parse_args(argv)
    if args.show:
        return show(args.show)
    started = datetime.datetime.now(datetime.UTC)
    json_path = args.json or HERE / "out" / f"run-{started:%Y%m%d-%H%M%S}.json"
    load = os.getloadavg()
    print(f"python: {args.python}", flush=True)
    if load[0] > BUSY_LOADAVG:
        print(
            f"warning: load average is {load[0]:.2f} before starting; another process is "
            "using the CPU and timings will be noisy",
            file=sys.stderr,
            flush=True,
        )
    with tempfile.TemporaryDirectory(prefix="memtape-bench-") as scratch:
        runner = Runner(args, scratch)
        runner.probe_tracers()
        workloads = {workload: runner.run_workload(workload) for workload in args.workloads}
    finished = datetime.datetime.now(datetime.UTC)
    report = {
        "meta": {
            "python": args.python,
            "runs": args.runs,
            "quick": args.quick,
            "host": {"platform": platform.platform(), "cpu_count": os.cpu_count()},
            "started": started.isoformat(timespec="seconds"),
            "finished": finished.isoformat(timespec="seconds"),
            "loadavg_at_start": load,
            "tracers": runner.probes,
        },
        "workloads": workloads,
    }
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"\nraw numbers: {json_path}", flush=True)
    return 1 if runner.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
