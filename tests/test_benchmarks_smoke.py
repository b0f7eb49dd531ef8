"""Smoke test of benchmarks/run.py: the runner starts, measures and prints its table.

No timing is asserted; `--quick` uses tiny workload sizes and one run per configuration.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

RUNNER = Path(__file__).resolve().parent.parent / "benchmarks" / "run.py"
CONFIGS = ("untraced", "memtape1")


def test_quick_run_prints_a_row_per_config(tmp_path: Path) -> None:
    raw = tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(RUNNER),
            "--quick",
            "--bracket",
            "--configs",
            ",".join(CONFIGS),
            "--json",
            str(raw),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr

    tables = proc.stdout.split("\n== ")[1:]
    assert [table.split()[0] for table in tables] == ["alloc_heavy", "deep_recursion"]
    for table in tables:
        lines = table.split("\n\n")[0].splitlines()
        assert lines[1].split()[:3] == ["config", "median", "s"], table
        row_names = [line.split()[0] for line in lines[2:]]
        assert sorted(row_names) == sorted(CONFIGS), table

    report = json.loads(raw.read_text())
    untraced = report["workloads"]["alloc_heavy"]["configs"]["untraced"]
    assert untraced["status"] == "ok" and len(untraced["runs"]) == 1
    # Each traced run is bracketed: the untraced run before it and an extra one after.
    for workload in report["workloads"].values():
        for name, config in workload["configs"].items():
            if name != "untraced" and config["status"] == "ok":
                around = config["runs"][0]["untraced_around_s"]
                assert around[0] == workload["configs"]["untraced"]["runs"][0]["seconds"]
                assert len(around) == 2 and around[1] > 0, config
                row = next(line for line in proc.stdout.splitlines() if line.startswith(name))
                assert row.split()[5].endswith("x"), row
    if importlib.util.find_spec("memtape") is not None:
        # memtape is installed in this interpreter, so its row must be a measurement.
        for workload in report["workloads"].values():
            memtape = workload["configs"]["memtape1"]
            assert memtape["status"] == "ok", memtape
            assert memtape["runs"][0]["traced_peak_bytes"] > 0, memtape
