"""Smoke test of benchmarks/hook_floor.py: the floor's C hooks build, record every event,
and the table lists each step beside memtape's recorders.

No timing is asserted; one round of a tiny alloc_heavy. The C file reads the frame layout
of CPython 3.11 and 3.12: on the other versions the script must refuse, and say why.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "hook_floor.py"
FLOOR_ROWS = (
    "floor: hooks only",
    "floor: + record, 512 KiB ring",
    "floor: + record, 32 MiB ring",
    "floor: + innermost frame",
    "floor: + chain (25 frames)",
    "floor: + chain + lock",
)


def run_script() -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--runs", "1", "--rows", "500"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_floor_records_every_event_or_refuses_other_versions() -> None:
    proc = run_script()
    if not (3, 11) <= sys.version_info[:2] <= (3, 12):
        assert proc.returncode != 0
        assert "CPython 3.11 or 3.12 only" in proc.stderr, proc.stderr
        return
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {}
    for line in proc.stdout.splitlines()[2:]:
        name, _, rest = line.partition("  ")
        rows[name.strip()] = rest
    assert list(rows)[: len(FLOOR_ROWS)] == list(FLOOR_ROWS), proc.stdout
    assert {"memtape1", "memtape25", "memtape-capture", "memtape-events"} <= set(rows)
    written = {}
    for name in FLOOR_ROWS:
        found = re.search(r"([\d,]+) records a run", rows[name])
        assert found, rows[name]
        written[name] = int(found.group(1).replace(",", ""))
    # The hooks that only forward write nothing; every other step writes a record for
    # each allocation and free of the run (alloc_heavy makes about 70 a row).
    assert written.pop("floor: hooks only") == 0
    counts = sorted(written.values())
    assert counts[0] > 500 * 50, written
    assert counts[-1] - counts[0] <= counts[0] // 20, written
