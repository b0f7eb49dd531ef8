"""The memory_viz harness itself: PyTorch's CLI accepts a valid snapshot, rejects a bad one.

The snapshots are written by hand (plain dicts, research/torch_snapshot.md section 1), so
these tests check the harness, not memtape. They need PyTorch's ``_memory_viz.py``; it is
fetched from PyPI on first use, and a test fails (never skips) if it cannot be.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path
from typing import Any

import pytest
from torch_viz.memory_viz import (
    COMMANDS,
    SnapshotCheckError,
    check_snapshot,
    embedded_snapshot,
    load_memory_viz,
)

SEGMENT = 0x7F0000000000
SEGMENT_SIZE = 2 * 1024 * 1024
EPOCH_US = 1_700_000_000_000_000


def frame(name: str, line: int) -> dict[str, Any]:
    return {"filename": "/app/train.py", "line": line, "name": name}


def event(action: str, offset: int, size: int, tick: int, **extra: Any) -> dict[str, Any]:
    """A trace entry at ``SEGMENT + offset`` (a new dict each time, as the viewer needs)."""
    return {
        "action": action, "addr": SEGMENT + offset, "size": size, "time_us": EPOCH_US + tick,
        "stream": 0, "compile_context": "", "user_metadata": "", "pool_id": (0, 0), **extra,
    }  # fmt: skip


def block(offset: int, size: int, requested: int, state: str, *frames: Any) -> dict[str, Any]:
    return {
        "address": SEGMENT + offset, "size": size, "requested_size": requested,
        "state": state, "frames": list(frames),
    }  # fmt: skip


def caching_allocator_snapshot() -> dict[str, Any]:
    """One 2 MiB segment holding two live blocks, and the trace that led there."""
    segment = {
        "device": 0, "address": SEGMENT, "total_size": SEGMENT_SIZE,
        "allocated_size": 1536, "active_size": 1536, "requested_size": 1500,
        "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
        "is_expandable": False, "frames": [],
        "blocks": [
            block(0, 1024, 1000, "active_allocated", frame("f", 10)),
            block(1024, 512, 500, "active_allocated", frame("g", 20)),
            block(1536, SEGMENT_SIZE - 1536, 0, "inactive"),
        ],
    }  # fmt: skip
    trace = [
        event("segment_alloc", 0, SEGMENT_SIZE, 0, frames=[frame("f", 10)]),
        event("alloc", 0, 1024, 1, frames=[frame("f", 10)]),
        event("alloc", 1024, 512, 2, frames=[frame("g", 20)]),
        event("alloc", 1536, 512, 3, frames=[frame("h", 30)]),
        event("free_requested", 1536, 512, 4),
        event("free_completed", 1536, 512, 4),
    ]
    oom = event("oom", 0, 1 << 40, 5, device_free=1234)
    del oom["addr"]  # an oom entry has device_free instead
    return {
        "segments": [segment],
        "device_traces": [[*trace, oom]],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": ""},
    }


def write_snapshot(directory: Path, snapshot: dict[str, Any]) -> Path:
    path = directory / "snapshot.pickle"
    path.write_bytes(pickle.dumps(snapshot, protocol=4))
    return path


def test_valid_snapshot_passes_every_command(tmp_path: Path) -> None:
    outputs = check_snapshot(write_snapshot(tmp_path, caching_allocator_snapshot()))

    assert tuple(outputs) == COMMANDS
    stats = outputs["stats"].splitlines()
    assert "segments: 1" in stats
    assert "total_reserved: 2.0MiB" in stats
    assert "total_allocated: 1.5KiB" in stats
    trace = outputs["trace"]
    assert f"a = cudaMalloc({SEGMENT}, 2.0MiB)" in trace
    assert "raise OutOfMemoryError" in trace


def test_blocks_that_do_not_tile_the_segment_are_rejected(tmp_path: Path) -> None:
    snapshot = caching_allocator_snapshot()
    snapshot["segments"][0]["total_size"] += 512  # the blocks now sum to less

    with pytest.raises(SnapshotCheckError, match=r"(?s)_memory_viz\.py stats .*AssertionError"):
        check_snapshot(write_snapshot(tmp_path, snapshot))


def test_unreadable_file_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(b'{"segments": [], "device_traces": []}')  # JSON: the CLI reads pickles

    with pytest.raises(SnapshotCheckError, match="UnpicklingError"):
        check_snapshot(path)


def test_module_loads_from_the_file_without_torch() -> None:
    torch_was_loaded = "torch" in sys.modules
    module = load_memory_viz()
    snapshot = caching_allocator_snapshot()

    assert torch_was_loaded or "torch" not in sys.modules
    assert embedded_snapshot(module.segment_plot(snapshot)) == snapshot
    assert "segments: 1" in module.segsum(snapshot).splitlines()


def test_page_without_an_embedded_snapshot_is_rejected() -> None:
    page = load_memory_viz().segment_plot(caching_allocator_snapshot())
    stripped = "\n".join(line for line in page.splitlines() if "local_files = " not in line)

    with pytest.raises(ValueError, match="expected one"):
        embedded_snapshot(stripped)
