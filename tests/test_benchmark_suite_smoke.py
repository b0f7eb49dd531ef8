"""Smoke test of benchmarks/test_suite_tracing.py: it fetches the project, runs a slice of
its tests plain and under memtape, and reports the same test count for both.

No timing is asserted. The standard library mode is left out: under
``PYTHONTRACEMALLOC=25`` pytest's start-up alone takes about 20 s.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "test_suite_tracing.py"


def test_a_small_run_reports_both_modes(tmp_path: Path) -> None:
    numbers = tmp_path / "suite.json"
    proc = subprocess.run(
        [
            *(sys.executable, str(SCRIPT), "--runs", "1", "--modes", "plain,memtape"),
            *("-k", "test_lru", "--work", str(tmp_path / "work"), "--json", str(numbers)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    modes = json.loads(numbers.read_text())["modes"]
    assert list(modes) == ["plain", "memtape"]
    assert modes["plain"]["tests"] == modes["memtape"]["tests"]
    assert modes["plain"]["tests"][0] > 10
    assert all(m["best_s"] > 0 for m in modes.values())
    assert "memtape" in proc.stdout.splitlines()[-1]
