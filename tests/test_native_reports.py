"""Native memory in the reports: totals and the peak include it, and stats, top, diff,
flamegraph and report show the split by source (Python heap, native, framework), in text
and in ``--json``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from memtape_cli import memtape, ok, python, read_json, record, write_program
from native_lib import NativeLibs, build, build_library

PROGRAM = """
import ctypes, sys
import numpy as np
lib = ctypes.CDLL(sys.argv[1])
lib.na_malloc.restype = ctypes.c_void_p
lib.na_malloc.argtypes = [ctypes.c_size_t]
lib.na_free.argtypes = [ctypes.c_void_p]
native = lib.na_malloc(3_000_000)
array = np.ones(250_000)  # 2,000,000 bytes
text = [str(i) * 10 for i in range(10_000)]
lib.na_free(native)
"""


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("native-reports")
    libs: NativeLibs = build(out)
    script = write_program(out / "mixed.py", PROGRAM)
    path = out / "mixed.mtape"
    record(script, path, str(libs.alloc))
    return path


def test_stats_json_splits_peak_and_end(capture: Path) -> None:
    data = read_json("stats", capture)
    peak = data["peak"]["by_source"]
    assert set(peak) == {"python", "native", "framework", "mlx"}
    assert peak["native"] >= 3_000_000
    assert peak["framework"] >= 2_000_000
    assert peak["python"] > 0
    assert sum(peak.values()) == data["peak"]["bytes"]
    # The run's peak RSS is recorded beside it (what memtape did not see is the rest).
    assert data["run"]["max_rss_bytes"] > 10_000_000
    end = data["end"]["by_source"]
    assert end["native"] < 3_000_000
    assert sum(end.values()) == data["end"]["bytes"]


def test_stats_and_top_text_show_the_split(capture: Path) -> None:
    stats = ok(memtape("stats", capture)).stdout
    assert "by source:" in stats and "native" in stats
    assert "Peak RSS:" in stats
    top = ok(memtape("top", capture)).stdout
    assert "By source: python" in top
    top_json = read_json("top", capture)
    assert top_json["by_source"]["native"] >= 3_000_000


def test_diff_flamegraph_and_report_show_the_split(capture: Path, tmp_path: Path) -> None:
    diff = ok(memtape("diff", capture, capture)).stdout
    # A zero change reads "0 B", as the table's diff column writes it.
    assert "By source (NEW - OLD): python 0 B, native 0 B, framework 0 B, mlx 0 B" in diff
    assert read_json("diff", capture, capture)["by_source_diff"] == {
        "python": 0,
        "native": 0,
        "framework": 0,
        "mlx": 0,
    }
    flame = tmp_path / "flame.html"
    ok(memtape("flamegraph", capture, "-o", flame))
    assert "native" in flame.read_text(encoding="utf-8")
    report = tmp_path / "report.html"
    ok(memtape("report", capture, "-o", report))
    html = report.read_text(encoding="utf-8")
    assert 'id="peak-by-source"' in html and 'data-source="native"' in html


OWN_ALLOCATOR = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
assert lib.oa_touch(40) == 0
"""


def test_untracked_rss_names_an_allocator_of_its_own(tmp_path: Path) -> None:
    """A library with its own allocator (raw mmap system calls, a mimalloc entry point):
    its 40 MiB are not seen, and the reports say how much RSS is untracked and which
    library has an allocator of its own."""
    lib = build_library("ownalloc", tmp_path)
    script = write_program(tmp_path / "own.py", OWN_ALLOCATOR)
    path = tmp_path / "own.mtape"
    record(script, path, str(lib))
    rss = read_json("stats", path)["rss"]
    # Not seen: the anonymous memory added beyond the recorded peak and memtape's own
    # (what memtape holds, resident or not: it may hide that much of the 40 MiB).
    assert rss["untracked_bytes"] >= (40 << 20) - rss["memtape_own_bytes"], rss
    assert rss["untracked_bytes"] == rss["not_seen_bytes"], rss
    assert rss["untracked_bytes"] <= rss["peak_rss_bytes"] - rss["at_start"]["rss"], rss
    assert {"path": str(lib), "allocator": "mimalloc", "symbol": "mi_malloc"} in rss[
        "private_allocators"
    ]
    stats = ok(memtape("stats", path)).stdout
    assert f"{lib} (mimalloc): not seen by memtape" in stats
    not_seen = r"not seen:\s+[34]\d\.\d MiB \(anonymous and shared memory added"
    assert re.search(not_seen, stats), stats
    html = tmp_path / "own.html"
    ok(memtape("report", path, "-o", html))
    page = html.read_text(encoding="utf-8")
    assert 'data-key="untracked-rss"' in page and 'data-key="private-allocators"' in page
    assert "libownalloc.so (mimalloc)" in page


TWO_CAPTURES = """
import ctypes, sys
from memtape import _native

def capture(path):
    _native._start_capture(path, "{}", 0, True)
    _native._stop_capture()

capture(sys.argv[2])  # before the library is loaded
lib = ctypes.CDLL(sys.argv[1])
capture(sys.argv[3])  # after
"""


def test_an_allocator_of_its_own_loaded_between_two_captures(tmp_path: Path) -> None:
    """The list of allocators of their own is made again once the loader loaded an
    object: a capture after another (the pytest plugin's) names a library loaded
    between them, and the one before does not."""
    lib = build_library("ownalloc", tmp_path)
    script = write_program(tmp_path / "two.py", TWO_CAPTURES)
    before, after = tmp_path / "before.mtape", tmp_path / "after.mtape"
    ok(python(script, lib, before, after))
    mine = {"path": str(lib), "allocator": "mimalloc", "symbol": "mi_malloc"}
    assert mine not in read_json("stats", before)["rss"]["private_allocators"]
    assert mine in read_json("stats", after)["rss"]["private_allocators"]


def test_no_allocator_of_its_own_in_an_ordinary_run(capture: Path) -> None:
    rss = read_json("stats", capture)["rss"]
    assert rss["private_allocators"] == []
    assert rss["untracked_bytes"] == rss["not_seen_bytes"] < 2 << 20, rss
