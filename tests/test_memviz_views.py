"""Every kind of snapshot memtape writes works in every view of PyTorch's own viewer.

Each test records a program, dumps a snapshot, checks it with ``viewer_replay`` (the
viewer's own replay of the allocator state, at every event, naming the event that breaks
it) and renders it in the real MemoryViz.js, headless (``memviz_harness``): the four
views, hovering timeline polygons, selecting events in Allocator State History (which
replays the state to that event) and hovering the redrawn segments and blocks. Any
uncaught exception, console error, request off the machine, NaN or ``undefined`` fails.

The harness draws one device per snapshot (the longest trace), so a snapshot with several
devices is rendered once per device, reduced to that device. One Chromium launch per
rendering, five in all (about 15 s each on a loaded machine).
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import memtape
import pytest
from memviz_harness import VIEWS, one_device, render, stat, write_pickle
from viewer_replay import merged_trace, problems

HERE = Path(__file__)
# State History events the harness selects (it samples this many, spread evenly).
PROBES = 300


@pytest.fixture(autouse=True)
def stopped() -> Iterator[None]:
    memtape.record_memory_events(False)
    yield
    memtape.record_memory_events(False)


def read(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        data: dict[str, Any] = pickle.load(f)
    return data


def heap_program(rounds: int = 600) -> list[bytes]:
    keep = []
    for i in range(rounds):
        keep.append(bytes(64 + i % 300))
        if i % 3 == 0:
            del keep[0]
    return keep


class Buffers:
    """A caching allocator's buffers at addresses of one test, reported through the
    framework API (every report consistent, or it raises)."""

    def __init__(self, base: int, device: int) -> None:
        self.base, self.device = base, device
        self.active: dict[int, int] = {}
        self.cached: dict[int, int] = {}

    def report(self, action: str, addr: int, size: int, **extra: int) -> None:
        memtape.record_allocator_event(action, addr, size, device=self.device, **extra)

    def new(self, index: int, size: int) -> int:
        addr = self.base + index * 0x10_0000
        self.report("AllocNew", addr, size, requested_size=size - 96)
        self.active[addr] = size
        return addr

    def to_cache(self, addr: int) -> None:
        self.report("FreeActiveToCache", addr, 0)
        self.cached[addr] = self.active.pop(addr)

    def reuse(self, addr: int) -> None:
        size = self.cached.pop(addr)
        self.report("AllocReuse", addr, size, requested_size=size // 2)
        self.active[addr] = size

    def release(self) -> None:
        """Gives everything back (the allocator's state outlives the test)."""
        for addr in list(self.active):
            self.report("FreeActiveToOS", addr, 0)
            del self.active[addr]
        for addr in list(self.cached):
            self.report("FreeCacheToOS", addr, 0)
            del self.cached[addr]


def framework_program(buffers: Buffers, rounds: int = 60) -> None:
    """New buffers, some cached and reused, some given back, a wrapped foreign buffer."""
    tb = memtape.capture_traceback()
    for i in range(rounds):
        with memtape.op_context("matmul" if i % 2 else "add", traceback=tb if i % 3 else 0):
            addr = buffers.new(100 + i, 4096 * (1 + i % 4))
        if i % 4 == 1:
            buffers.to_cache(addr)
        if i % 8 == 5:
            buffers.reuse(addr)
        if i % 5 == 4 and addr in buffers.active:
            buffers.report("FreeActiveToOS", addr, 0)
            del buffers.active[addr]
    foreign = buffers.base + 0x7000_0000
    buffers.report("AllocMakeBuffer", foreign, 8192)
    buffers.report("Release", foreign, 0)


def check(snapshot: dict[str, Any]) -> None:
    found = problems(snapshot)
    assert found == [], "\n".join(found[:20])


def assert_probed(lines: dict[str, str], snapshot: dict[str, Any], device: int) -> None:
    """Allocator State History listed the device's events and selected PROBES of them
    (or all); the timelines drew the allocations."""
    history = lines["Allocator State History"]
    listed = len(merged_trace(snapshot["device_traces"][device]))
    assert stat(history, "events") == listed
    assert stat(history, "probes") >= min(PROBES, listed) >= 200
    for view in VIEWS:
        assert stat(lines[view], "drawn") > 0, lines[view]


def lost_allocations(trace: list[dict[str, Any]]) -> int:
    """Frees in ``trace`` whose alloc fell out of the ring."""
    seen: set[int] = set()
    lost = 0
    for entry in trace:
        if entry["action"] == "alloc":
            seen.add(entry["addr"])
        elif entry["action"] == "free_completed" and entry["addr"] not in seen:
            lost += 1
    return lost


def test_python_heap_whose_ring_wrapped(tmp_path: Path) -> None:
    memtape.record_memory_events(True, 700)
    kept = heap_program()
    memtape.record_memory_events(False)
    out = tmp_path / "python.pickle"
    memtape.dump_snapshot(out)
    snap = read(out)
    host = snap["allocator_settings"]["python_heap_device_index"]
    trace = snap["device_traces"][host]
    assert lost_allocations(trace) > 0, "the ring should have lost some allocations"
    assert snap["segments"], "live host blocks are segments"
    check(snap)
    lines = render(out, tmp_path / "views", probe=PROBES)
    assert_probed(lines, snap, host)
    del kept


def test_framework_and_python_heap_mixed(tmp_path: Path) -> None:
    before = Buffers(0x7E00_0000_0000, device=1)
    early = before.new(0, 1 << 20)  # allocated before the recording, freed during it
    cached = before.new(1, 1 << 16)
    before.to_cache(cached)
    buffers = Buffers(0x7E10_0000_0000, device=1)
    memtape.record_memory_events(True, 1500)
    before.reuse(cached)
    kept = heap_program(300)
    framework_program(buffers, rounds=120)
    before.to_cache(early)
    memtape.record_memory_events(False)
    out = tmp_path / "mixed.pickle"
    memtape.dump_snapshot(out)
    saved = memtape.get_memory_events()
    before.release()
    buffers.release()

    snap = read(out)
    host = snap["allocator_settings"]["python_heap_device_index"]
    assert host == 2 and len(snap["device_traces"]) == 3
    assert snap["device_traces"][1] and snap["device_traces"][host]
    check(snap)
    for device in (1, host):
        path = write_pickle(one_device(snap, device), tmp_path / f"device{device}.pickle")
        lines = render(path, tmp_path / f"views{device}", probe=PROBES)
        assert_probed(lines, snap, device)

    # The same events saved from get_memory_events: no allocator state comes with them,
    # so the segments are replayed from the trace alone.
    from_saved = tmp_path / "saved.pickle"
    memtape.dump_snapshot(from_saved, events=saved)
    saved_snap = read(from_saved)
    assert saved_snap["device_traces"] == snap["device_traces"]
    check(saved_snap)
    del kept


def test_saved_framework_events_render(tmp_path: Path) -> None:
    buffers = Buffers(0x7E20_0000_0000, device=0)
    early = buffers.new(0, 1 << 18)
    memtape.record_memory_events(True, 400, sources=("framework",))
    framework_program(buffers, rounds=120)
    buffers.to_cache(early)
    memtape.record_memory_events(False)
    saved = memtape.get_memory_events()
    buffers.release()
    out = tmp_path / "saved.pickle"
    memtape.dump_snapshot(out, events=saved)
    snap = read(out)
    assert lost_allocations(snap["device_traces"][0]) > 0
    check(snap)
    lines = render(out, tmp_path / "views", probe=PROBES)
    assert_probed(lines, snap, 0)


def test_dump_after_the_allocator_moved_on(tmp_path: Path) -> None:
    """Dumped after the recording stopped and the allocator changed: the segments still
    match where the trace ends."""
    buffers = Buffers(0x7E30_0000_0000, device=0)
    memtape.record_memory_events(True, 10_000, sources=("framework",))
    framework_program(buffers, rounds=40)
    memtape.record_memory_events(False)
    addrs = list(buffers.active)
    for addr in addrs[::2]:
        buffers.to_cache(addr)
    buffers.report("FreeCacheToOS", addrs[0], 0)
    del buffers.cached[addrs[0]]
    buffers.new(0, 4096)  # a buffer the trace never saw
    out = tmp_path / "later.pickle"
    memtape.dump_snapshot(out)
    buffers.release()
    snap = read(out)
    check(snap)
    states = {s["address"]: s["blocks"][0]["state"] for s in snap["segments"]}
    assert states[addrs[0]] == "active_allocated", "as the trace left it"
    assert states[buffers.base] == "active_allocated", "untouched by the trace: the allocator's"


def test_min_size_and_json_snapshots(tmp_path: Path) -> None:
    buffers = Buffers(0x7E40_0000_0000, device=0)
    memtape.record_memory_events(True, 2000, min_size=200)
    kept = heap_program(400)
    framework_program(buffers, rounds=30)
    memtape.record_memory_events(False)
    out = tmp_path / "snap.json"
    memtape.dump_snapshot(out)
    buffers.release()
    snap = json.loads(out.read_text())
    assert all(e["size"] >= 200 for t in snap["device_traces"] for e in t if e["action"] == "alloc")
    check(snap)
    del kept


def test_capture_export(tmp_path: Path) -> None:
    script = tmp_path / "program.py"
    script.write_text(
        "keep = []\n"
        "for i in range(3000):\n"
        "    keep.append(bytes(50 + i % 700))\n"
        "    if i % 2:\n"
        "        del keep[0]\n"
    )
    capture, out = tmp_path / "program.mtape", tmp_path / "export.pickle"
    run = [sys.executable, "-m", "memtape"]
    subprocess.run([*run, "run", "-q", "-o", str(capture), str(script)], check=True)
    subprocess.run(
        [
            *run,
            "export",
            str(capture),
            "--format",
            "torch",
            "--max-entries",
            "1200",
            "-o",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    snap = read(out)
    assert lost_allocations(snap["device_traces"][0]) > 0
    check(snap)
    lines = render(out, tmp_path / "views", probe=PROBES)
    assert_probed(lines, snap, 0)


def test_the_replay_check_names_the_event_that_breaks_the_viewer() -> None:
    """A snapshot as memtape wrote them before host segments: frees of blocks in no segment."""
    entry = {"stream": 0, "time_us": 1, "compile_context": "", "user_metadata": ""}
    trace = [
        {"action": "alloc", "addr": 0x1000, "size": 64, **entry},
        {"action": "free_requested", "addr": 0x1000, "size": 64, **entry},
        {"action": "free_completed", "addr": 0x1000, "size": 64, **entry},
        {"action": "alloc", "addr": 0x2000, "size": 32, **entry},
    ]
    found = problems({"segments": [], "device_traces": [trace]})
    assert found[0] == (
        "device 0, entry #3 (alloc 0x2000): the block it allocates is not live after it "
        "(segments disagree)"
    )
    assert "device 0, entry #1 (free 0x1000): block 0x1000+64 lies in no segment" in found[1]
