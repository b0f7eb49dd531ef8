"""Every snapshot memtape writes opens in PyTorch's own memory viewer code.

Each test records a program, dumps a snapshot, and runs the real
``torch/cuda/_memory_viz.py`` (``stats``, ``trace``, ``trace_plot``, ``segment_plot``) on it.
"""

from __future__ import annotations

import itertools
import json
import os
import pickle
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import memtape
import pytest
from c_abi.build import build_fakecache, load
from torch_viz.memory_viz import check_snapshot

HERE = Path(__file__)


@pytest.fixture(autouse=True)
def stopped() -> Iterator[None]:
    memtape.record_memory_events(False)
    yield
    memtape.record_memory_events(False)


@pytest.fixture(scope="module")
def fakecache(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    return load(build_fakecache(tmp_path_factory.mktemp("cabi-viz")))


def read(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        data: dict[str, Any] = pickle.load(f)
    return data


def plain_python_program() -> list[Any]:
    keep = []
    for i in range(200):
        row = {"id": i, "name": f"row{i}", "values": list(range(i % 50))}
        keep.append(row)
        if i % 3 == 0:
            keep.pop(0)
    return keep


def test_plain_python_program(tmp_path: Path) -> None:
    memtape.record_memory_events(True, 50_000)
    kept = plain_python_program()
    memtape.record_memory_events(False)
    out = tmp_path / "python.pickle"
    memtape.dump_snapshot(out)
    snap = read(out)
    # The host heap: one segment per block live at the end, on the host's trace list.
    assert snap["segments"]
    assert {s["device"] for s in snap["segments"]} == {0}
    assert all(len(s["blocks"]) == 1 for s in snap["segments"])
    trace = snap["device_traces"][0]
    actions = {e["action"] for e in trace}
    assert {"alloc", "free_requested", "free_completed"} <= actions
    # A free_requested is always followed by its free_completed at the same address.
    for a, b in itertools.pairwise(trace):
        if a["action"] == "free_requested":
            assert (b["action"], b["addr"]) == ("free_completed", a["addr"])
    ours = [e for e in trace if e.get("frames") and e["frames"][0]["filename"] == str(HERE)]
    assert any(e["frames"][0]["name"] == "plain_python_program" for e in ours)
    outputs = check_snapshot(out)
    assert "Active Memory Timeline" in outputs["trace_plot"]
    del kept


def test_caching_allocator_through_the_c_abi(tmp_path: Path, fakecache: ModuleType) -> None:
    memtape.record_memory_events(True, 50_000, sources=("framework",))
    live = [fakecache.alloc(4096 * (1 + i % 3)) for i in range(12)]
    for addr, i in zip(live[:8], range(8), strict=True):
        fakecache.free(addr, 4096 * (1 + i % 3))
    again = [fakecache.alloc(4096) for _ in range(3)]
    tb = memtape.capture_traceback()
    lazy = fakecache.eval([("matmul", tb, 20000)])
    memtape.record_memory_events(False)
    out = tmp_path / "cache.pickle"
    memtape.dump_snapshot(out)
    snap = read(out)
    assert len(snap["device_traces"]) == 1
    segments = snap["segments"]
    assert segments, "a caching allocator leaves segments"
    for seg in segments:
        assert sum(b["size"] for b in seg["blocks"]) == seg["total_size"]
    states = {b["state"] for seg in segments for b in seg["blocks"]}
    assert states == {"active_allocated", "inactive"}
    cats = {e.get("category") for e in snap["device_traces"][0]}
    assert {"matmul", "unknown"} <= cats
    outputs = check_snapshot(out)
    assert "segments:" in outputs["stats"]
    for addr, size in [(a, 4096 * (1 + i % 3)) for i, a in enumerate(live) if i >= 8]:
        fakecache.free(addr, size)
    for addr in again:
        fakecache.free(addr, 4096)
    fakecache.free(lazy[0], 20480)
    fakecache.empty_cache()


def test_wrapped_ring_with_frees_whose_alloc_fell_out(tmp_path: Path) -> None:
    memtape.record_allocator_event("AllocNew", 0x10_0000, 1 << 20)  # before the recording
    memtape.record_memory_events(True, 40, sources=("framework",))
    for i in range(30):
        memtape.record_allocator_event("AllocNew", 0x20_0000 + i * 0x1000, 4096)
    for i in range(30):
        memtape.record_allocator_event("FreeActiveToOS", 0x20_0000 + i * 0x1000, 0)
    memtape.record_allocator_event("FreeActiveToCache", 0x10_0000, 0)
    memtape.record_memory_events(False)
    assert memtape._native.memory_event_counts() == (40, 21)
    out = tmp_path / "wrapped.pickle"
    memtape.dump_snapshot(out)
    snap = read(out)
    trace = snap["device_traces"][0]
    frees = [e for e in trace if e["action"] == "free_completed"]
    allocs = {e["addr"] for e in trace if e["action"] == "alloc"}
    assert any(e["addr"] not in allocs for e in frees), "some frees lost their alloc"
    check_snapshot(out)
    memtape.record_allocator_event("FreeCacheToOS", 0x10_0000, 0)


def test_json_and_saved_events(tmp_path: Path) -> None:
    memtape.record_memory_events(True, 5000, min_size=1000)
    blobs = [bytearray(5000) for _ in range(20)]
    del blobs[::2]
    memtape.record_memory_events(False)
    events = memtape.get_memory_events()
    live_pickle, saved_pickle = tmp_path / "live.pickle", tmp_path / "saved.pickle"
    memtape.dump_snapshot(live_pickle)
    memtape.dump_snapshot(saved_pickle, events=events)
    assert read(live_pickle)["device_traces"] == read(saved_pickle)["device_traces"]
    as_json = tmp_path / "snap.json"
    memtape.dump_snapshot(as_json)
    assert json.loads(as_json.read_text())["device_traces"] == read(live_pickle)["device_traces"]
    check_snapshot(saved_pickle)
    with pytest.raises(ValueError, match="format must be"):
        memtape.dump_snapshot(tmp_path / "x", format="xml")  # type: ignore[arg-type]
    with pytest.raises(OSError, match="cannot write"):
        memtape.dump_snapshot(tmp_path / "missing-dir" / "x.pickle")
    with pytest.raises(ValueError, match=r"events\[0\]"):
        memtape.dump_snapshot(tmp_path / "y.pickle", events=[{"action": "alloc"}])


def test_dumping_over_an_existing_file(tmp_path: Path) -> None:
    # The file is overwritten in place and cut to length: a longer old file leaves no
    # bytes behind, a symlink's target is written (the link stays), the file's mode stays.
    memtape.record_memory_events(True, 5000, min_size=1000)
    blobs = [bytearray(5000) for _ in range(20)]
    del blobs[::2]
    memtape.record_memory_events(False)
    fresh = tmp_path / "fresh.pickle"
    memtape.dump_snapshot(fresh)
    old = tmp_path / "old.pickle"
    old.write_bytes(b"x" * (fresh.stat().st_size * 3))
    old.chmod(0o640)
    memtape.dump_snapshot(old)
    assert old.read_bytes() == fresh.read_bytes()
    assert old.stat().st_mode & 0o777 == 0o640
    target, link = tmp_path / "target.pickle", tmp_path / "link.pickle"
    target.write_bytes(b"y" * (fresh.stat().st_size + 1))
    link.symlink_to(target)
    memtape.dump_snapshot(link)
    assert link.is_symlink()
    assert target.read_bytes() == fresh.read_bytes()
    as_json = tmp_path / "snap.json"
    memtape.dump_snapshot(as_json)
    text = as_json.read_text()
    as_json.write_text(text + " " * len(text))
    memtape.dump_snapshot(as_json)
    assert as_json.read_text() == text
    check_snapshot(old)


def test_dumping_where_the_file_cannot_be_made(tmp_path: Path) -> None:
    """The error names the path, whether the parent is a file (for every user) or a
    directory without write permission (for a user that permissions bind: not root)."""
    memtape.record_memory_events(True, 100)
    blob = bytearray(5000)
    memtape.record_memory_events(False)
    del blob
    not_a_dir = tmp_path / "plain-file"
    not_a_dir.write_bytes(b"")
    with pytest.raises(OSError, match="cannot write"):
        memtape.dump_snapshot(not_a_dir / "x.pickle")
    if os.geteuid() == 0:
        return
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(OSError, match="cannot write"):
            memtape.dump_snapshot(locked / "x.pickle")
    finally:
        locked.chmod(0o700)
