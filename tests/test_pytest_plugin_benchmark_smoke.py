"""Smoke test of benchmarks/pytest_plugin.py on a small generated suite: plain pytest,
pytest --memray and pytest --memtape each run it and pass the same tests, and the table
has a row and ratios for each, and the CPU time of each mode's threads. No timing is
asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "pytest_plugin.py"


def run_tiny(tmp_path: Path, *args: str) -> tuple[str, dict[str, Any]]:
    """The script on the tiny suite with `args`: its output and its numbers by mode."""
    numbers = tmp_path / "plugin.json"
    proc = subprocess.run(
        [*(sys.executable, str(SCRIPT), "--suites", "tiny", *args), "--json", str(numbers)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout, json.loads(numbers.read_text())["tiny"]


def test_a_small_tiny_suite_run_reports_every_mode(tmp_path: Path) -> None:
    stdout, modes = run_tiny(
        tmp_path, "--runs", "1", "--tiny-tests", "150", "--work", str(tmp_path / "work")
    )
    assert list(modes) == ["plain", "memray", "memtape"]
    assert all(m["tests"] == [150] for m in modes.values()), modes
    assert modes["plain"]["x_plain"] == 1.0 and modes["memray"]["x_memray"] == 1.0
    assert all(m["median_s"] > 0 and m["x_plain"] > 0 for m in modes.values())
    assert any(line.startswith("memtape      150") for line in stdout.splitlines())
    # Where each mode's CPU time went, by thread: the tests' own thread in every mode.
    assert all(m["median_thread_cpu_s"]["main"] > 0 for m in modes.values()), modes
    assert not any(r.startswith("memtape") for r in modes["plain"]["median_thread_cpu_s"])
    assert "  memtape: main " in stdout


def test_the_peer_runs_only_in_the_first_rounds(tmp_path: Path) -> None:
    """``--peer-runs 1``: pytest-memray once, plain pytest and --memtape every round
    (the results page's pytest part), each mode still passing the same tests."""
    stdout, modes = run_tiny(
        tmp_path, "--runs", "2", "--peer-runs", "1", "--tiny-tests", "100", "--work", str(tmp_path)
    )
    assert {name: len(m["wall_s"]) for name, m in modes.items()} == {
        "plain": 2,
        "memray": 1,
        "memtape": 2,
    }
    assert all(m["tests"] == [100] for m in modes.values()), modes
    # Each run's CPU time by thread, beside its wall time.
    assert [len(m["thread_cpu_s"]) for m in modes.values()] == [2, 1, 2]
    assert all(run["main"] > 0 for m in modes.values() for run in m["thread_cpu_s"])
    assert "interleaved runs per mode: plain 2, memray 1, memtape 2" in stdout
    # The order of the runs: memray only in the first round.
    order = [line.split(": ")[0] for line in stdout.splitlines() if " run " in line]
    assert order == [
        "tiny run 1/2 plain",
        "tiny run 1/2 memray",
        "tiny run 1/2 memtape",
        "tiny run 2/2 plain",
        "tiny run 2/2 memtape",
    ], order
