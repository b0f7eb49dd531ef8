"""A capture's frees: recorded by address whether or not a live table knows the block.

A capture alone keeps no live table of the Python heap (the replay finds each free's
block). These programs start a capture in process with blocks already allocated, and start
and stop tracemalloc or the event recorder in the middle of it (each clears or drops the
live table), then check through ``memtape stats`` that every block allocated during the
capture and freed is seen freed, that frees of older blocks are counted apart and change
no totals, and that a minimum size still keeps small blocks out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from child_python import describe
from memtape_cli import python, read_json, write_program

PROGRAM = """
import sys
import memtape
import memtape.tracemalloc as tracemalloc
from memtape import _native

path, min_size, middle = sys.argv[1], int(sys.argv[2]), sys.argv[3]
older = [bytearray(4000) for _ in range(500)]  # before the capture
_native._start_capture(path, "{}", min_size, False)
early = [bytearray(5000) for _ in range(100)]
if middle == "tracemalloc":
    tracemalloc.start(5)  # clears its traces
elif middle == "events":
    memtape.record_memory_events(True, 1000)
del older
del early  # allocated in the capture, freed after the live table was cleared
if middle == "tracemalloc":
    assert tracemalloc.get_traced_memory()[0] < 100_000, tracemalloc.get_traced_memory()
    tracemalloc.stop()
elif middle == "events":
    memtape.record_memory_events(False)
small = [bytearray(100) for _ in range(2000)]
del small
kept = [bytearray(3000) for _ in range(7)]
_native._stop_capture()
"""

EARLY = 100 * 5000
KEPT = 7 * 3000


def stats(tmp_path: Path, min_size: int, middle: str) -> dict[str, Any]:
    script = write_program(tmp_path / "frees.py", PROGRAM)
    capture = tmp_path / f"frees-{min_size}-{middle}.mtape"
    result = python(script, capture, str(min_size), middle)
    assert result.returncode == 0, describe(result)
    data: dict[str, Any] = read_json("stats", capture)
    return data


@pytest.mark.parametrize("middle", ["nothing", "tracemalloc", "events"])
@pytest.mark.parametrize("min_size", [0, 1000])
def test_every_free_in_the_capture_is_seen(tmp_path: Path, min_size: int, middle: str) -> None:
    data = stats(tmp_path, min_size, middle)
    totals, peak, end = data["totals"], data["peak"], data["end"]
    # The 500 older blocks' frees (and their list's) reach the file, matched to nothing.
    assert totals["unknown_frees"] >= 500, totals
    assert end["bytes"] == totals["bytes_allocated"] - totals["bytes_freed"], data
    # The early blocks were freed: only the kept ones (and their list, small) are left.
    assert KEPT <= end["bytes"] < KEPT + 2000, data
    assert peak["bytes"] >= EARLY, data
    if min_size:
        # Small blocks stay out, their frees too when the block is known.
        assert totals["allocs"] < 200, totals
    else:
        assert totals["allocs"] >= 2000 + 100 + 7, totals
        assert totals["bytes_freed"] >= EARLY + 2000 * 100, totals
