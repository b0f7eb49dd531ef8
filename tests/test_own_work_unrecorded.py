"""memtape's own work never enters the user's recording: not the event ring, not the
snapshot written from it, not a ``memtape run`` capture."""

from __future__ import annotations

import gc
import inspect
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import memtape
import pytest

HERE = str(Path(__file__).resolve())
PACKAGE = os.path.dirname(os.path.abspath(memtape.__file__)) + os.sep
BLOCK = sys.getsizeof(bytes(5000))


@pytest.fixture(autouse=True)
def quiet() -> Iterator[None]:
    """Recording stopped around each test; no garbage collection inside it (a collection
    would free the test's own garbage at a moment the test does not choose)."""
    memtape.record_memory_events(False)
    gc.collect()
    gc.disable()
    yield
    gc.enable()
    memtape.record_memory_events(False)


def blocks_program() -> list[bytes]:
    """The README's example program: 2,000 blocks of 5,000 bytes, 1,000 of them freed."""
    blocks = [bytes(5000) for _ in range(2000)]
    del blocks[::2]
    return blocks


def program_lines() -> range:
    lines, first = inspect.getsourcelines(blocks_program)
    return range(first, first + len(lines))


def site(event: dict[str, Any]) -> tuple[str, int] | None:
    """Where an event happened: its innermost frame (frames are outermost first)."""
    frames = event["frames"]
    return (frames[-1][0], frames[-1][2]) if frames else None


def test_readme_recorder_flow_keeps_only_the_programs_events(tmp_path: Path) -> None:
    out = tmp_path / "out.pickle"
    memtape.record_memory_events(enabled=True, max_entries=1500)
    kept = blocks_program()
    events = memtape.get_memory_events()
    memtape.dump_snapshot(out)
    again = memtape.get_memory_events()
    memtape.record_memory_events(enabled=False)

    assert len(events) == 1500, "the program made more events than the ring keeps"
    lines = program_lines()
    for event in events:
        where = site(event)
        assert where is not None and where[0] == HERE and where[1] in lines, event
    frees = [e for e in events if e["action"] == "free" and e["size"] == BLOCK]
    assert len(frees) == 1000, "every free of the program is kept"
    assert again == events, "get_memory_events and dump_snapshot recorded nothing"

    with out.open("rb") as f:
        snap = pickle.load(f)
    trace = snap["device_traces"][snap["allocator_settings"]["python_heap_device_index"]]
    written = [
        (e["action"], e["addr"], e["size"])
        for e in trace
        if e["action"] in ("alloc", "free_completed")
    ]
    recorded = [
        ("alloc" if e["action"] == "alloc" else "free_completed", e["address"], e["size"])
        for e in events
    ]
    assert written == recorded
    del kept


def test_memtape_calls_while_recording_add_no_events(tmp_path: Path) -> None:
    as_pickle, as_json = tmp_path / "a.pickle", tmp_path / "a.json"  # before recording
    memtape.record_memory_events(True, 10_000, sources=("python",))
    kept = [bytes(100) for _ in range(50)]
    before = memtape.get_memory_events()
    # What memtape hands out is untracked: the user freeing it records nothing either.
    thrown_away = memtape.get_memory_events()
    del thrown_away
    memtape.dump_snapshot(as_pickle)
    memtape.dump_snapshot(as_json, events=before)
    tb = memtape.capture_traceback()
    counts = memtape._native.memory_event_counts()
    recording = memtape.is_recording_memory_events()
    marked = memtape.mark("ignored")
    memtape.record_allocator_event("AllocNew", 0x7D00_0000_0000, 4096, requested_size=1000)
    memtape.record_allocator_event("FreeActiveToOS", 0x7D00_0000_0000, 0)
    after = memtape.get_memory_events()
    memtape.record_memory_events(False)

    assert before, "the program's own allocations were recorded"
    assert after == before
    assert tb != 0 and counts == (len(before), 0) and recording and not marked
    del kept


def capture_sites(capture: Path, out: Path) -> set[tuple[str, int, str]]:
    """The innermost frame of every allocation in a capture."""
    export = [sys.executable, "-m", "memtape", "export", str(capture), "--format", "torch"]
    subprocess.run(
        [*export, "--max-entries", "10000000", "-o", str(out)], check=True, capture_output=True
    )
    with out.open("rb") as f:
        snap = pickle.load(f)
    return {
        (e["frames"][0]["filename"], e["frames"][0]["line"], e["frames"][0]["name"])
        for trace in snap["device_traces"]
        for e in trace
        if e["action"] == "alloc" and e.get("frames")
    }


def test_memtape_run_captures_no_memtape_allocation_sites(tmp_path: Path) -> None:
    """Loading the script (runpy reading and compiling it, memtape making ``__main__``) is
    not the program's: the capture holds the script's own allocations only."""
    script, capture = tmp_path / "one_list.py", tmp_path / "one_list.mtape"
    script.write_text("kept = [0] * 1000\n")
    subprocess.run(
        [sys.executable, "-m", "memtape", "run", "-o", str(capture), str(script)],
        check=True,
        capture_output=True,
    )
    sites = capture_sites(capture, tmp_path / "one_list.pickle")
    assert sites == {(str(script), 1, "<module>")}, sites


def test_take_snapshot_adds_no_events() -> None:
    import memtape.tracemalloc as tm

    tm.start(1)
    try:
        memtape.record_memory_events(True, 10_000, sources=("python",))
        kept = [bytes(100) for _ in range(50)]
        before = memtape.get_memory_events()
        snapshot = tm.take_snapshot()
        after = memtape.get_memory_events()
        memtape.record_memory_events(False)
    finally:
        tm.stop()
    assert before and after == before
    del kept, snapshot


def test_dumps_while_native_memory_is_recorded_add_no_events(tmp_path: Path) -> None:
    # A dump writes its file on a thread of its own, whose start-up allocates natively
    # before it can mark itself as memtape's: it must not be started then.
    as_pickle, as_json = str(tmp_path / "a.pickle"), str(tmp_path / "a.json")
    memtape.record_memory_events(True, 10_000, sources=("python", "native"))
    kept = [bytes(100) for _ in range(50)]
    before = memtape.get_memory_events()
    memtape.dump_snapshot(as_pickle)
    memtape.dump_snapshot(as_json)
    memtape.dump_snapshot(as_pickle)
    memtape.dump_snapshot(as_json)
    after = memtape.get_memory_events()
    memtape.record_memory_events(False)

    assert before, "the program's own allocations were recorded"
    assert after == before
    del kept
