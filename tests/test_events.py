"""The memory event recorder: ring semantics, filters, attribution, threads, toggling."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import memtape
import pytest
from block_sizes import bytearray_buffer
from child_python import describe
from memtape_cli import python
from source_lines import line_of

HERE = Path(__file__)


@pytest.fixture(autouse=True)
def stopped() -> Iterator[None]:
    memtape.record_memory_events(False)
    yield
    memtape.record_memory_events(False)


def ours(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events whose innermost frame is in this file."""
    return [e for e in events if e["frames"] and e["frames"][-1][0] == str(HERE)]


def test_event_fields_and_frames_outermost_first() -> None:
    memtape.record_memory_events(True, 10_000, min_size=100_000)

    def inner() -> bytearray:
        return bytearray(200_000)  # @tm:ev-inner

    data = inner()  # @tm:ev-outer
    del data  # @tm:ev-del
    memtape.record_memory_events(False)
    events = memtape.get_memory_events()
    assert [e["action"] for e in events] == ["alloc", "free"]
    alloc, free = events
    assert set(alloc) == {
        "action",
        "address",
        "size",
        "requested_size",
        "device",
        "stream",
        "thread",
        "timestamp_ns",
        "op",
        "frames",
    }
    assert alloc["size"] == free["size"] == bytearray_buffer(200_000)
    assert alloc["address"] == free["address"]
    assert (alloc["device"], alloc["stream"], alloc["op"]) == (-1, 0, None)
    assert alloc["thread"] == threading.get_native_id()
    assert 0 < alloc["timestamp_ns"] <= free["timestamp_ns"]
    names = [(f[1], f[2]) for f in alloc["frames"][-2:]]
    assert names == [
        ("test_event_fields_and_frames_outermost_first", line_of(HERE, "ev-outer")),
        ("test_event_fields_and_frames_outermost_first.<locals>.inner", line_of(HERE, "ev-inner")),
    ]
    assert free["frames"][-1][2] == line_of(HERE, "ev-del")


def _drop(items: list[bytearray]) -> None:
    items.pop()  # @tm:ev-drop


def _drop_from_a(items: list[bytearray]) -> None:
    _drop(items)  # @tm:ev-drop-a


def _drop_from_b(items: list[bytearray]) -> None:
    _drop(items)  # @tm:ev-drop-b


def test_free_stacks_on_repeated_and_moved_lines() -> None:
    """Frees whose stack repeats the thread's last capture, or moved on from it by a
    line, or reached through the same frames from another caller, carry their own stack
    (the repeat path for frees must agree with a full walk)."""
    fn = "test_free_stacks_on_repeated_and_moved_lines"
    memtape.record_memory_events(True, 10_000, min_size=100_000)
    items = [bytearray(100_000 + i) for i in range(8)]
    for _ in range(2):
        _drop_from_a(items)  # @tm:ev-call-a
        _drop_from_b(items)  # @tm:ev-call-b
    x = items.pop()
    del x  # @tm:ev-del-x
    y = items.pop()
    del y  # @tm:ev-del-y
    memtape.record_memory_events(False)
    base = bytearray_buffer(100_000)
    frees = {
        e["size"] - base: [(f[1].rsplit(".", 1)[-1], f[2]) for f in e["frames"][-3:]]
        for e in ours(memtape.get_memory_events())
        if e["action"] == "free" and base <= e["size"] < base + 8
    }
    via_a = [(fn, line_of(HERE, "ev-call-a")), ("_drop_from_a", line_of(HERE, "ev-drop-a"))]
    via_b = [(fn, line_of(HERE, "ev-call-b")), ("_drop_from_b", line_of(HERE, "ev-drop-b"))]
    dropped = ("_drop", line_of(HERE, "ev-drop"))
    assert frees[7] == frees[5] == [*via_a, dropped]
    assert frees[6] == frees[4] == [*via_b, dropped]
    assert frees[3][-1] == (fn, line_of(HERE, "ev-del-x"))
    assert frees[2][-1] == (fn, line_of(HERE, "ev-del-y"))
    assert sorted(frees) == list(range(2, 8))


def test_ring_keeps_exactly_the_last_entries_in_order_across_threads() -> None:
    memtape.record_memory_events(True, 100, sources=("framework",))
    per_thread = 250

    def report(base: int) -> None:
        for i in range(per_thread):
            memtape.record_allocator_event("AllocNew", base + i * 16, 64)

    threads = [threading.Thread(target=report, args=(k << 32,)) for k in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    events = memtape.get_memory_events()
    assert len(events) == 100
    assert memtape._native.memory_event_counts() == (100, 4 * per_thread - 100)
    # Per thread, the kept events are the last ones it reported, in order.
    for k in range(1, 5):
        mine = [e["address"] - (k << 32) for e in events if e["address"] >> 32 == k]
        assert mine == [16 * i for i in range(per_thread - len(mine), per_thread)]
    # Timestamps follow the ring order.
    stamps = [e["timestamp_ns"] for e in events]
    assert stamps == sorted(stamps)
    for k in range(1, 5):
        for i in range(per_thread):
            memtape.record_allocator_event("FreeActiveToOS", (k << 32) + i * 16, 0)


def test_min_size_and_sources_filter() -> None:
    memtape.record_memory_events(True, 10_000, min_size=50_000, sources=("python",))
    small = [bytearray(100) for _ in range(10)]
    big = bytearray(60_000)  # @tm:filter-big
    memtape.record_allocator_event("AllocNew", 0xA000, 1 << 20)
    memtape.record_allocator_event("Release", 0xA000, 0)
    memtape.record_memory_events(False)
    events = memtape.get_memory_events()
    assert all(e["size"] >= 50_000 for e in events)
    assert all(e["device"] == -1 for e in events)
    assert [e["frames"][-1][2] for e in ours(events) if e["action"] == "alloc"] == [
        line_of(HERE, "filter-big")
    ]
    del small, big


def test_lazy_arrays_are_attributed_to_their_creation_lines() -> None:
    """Arrays built on lines A and B, allocated later inside eval on line C."""

    class LazyArray:
        def __init__(self, op: str, nbytes: int) -> None:
            self.op, self.nbytes = op, nbytes
            self.traceback = memtape.capture_traceback()
            self.buffer: bytearray | None = None

    def evaluate(arrays: list[LazyArray]) -> None:
        for i, a in enumerate(arrays):
            with memtape.op_context(a.op, traceback=a.traceback):
                memtape.record_allocator_event("AllocNew", 0xB0000 + i * 0x10000, a.nbytes)
                a.buffer = bytearray(a.nbytes)

    memtape.record_memory_events(True, 10_000, min_size=10_000)
    a = LazyArray("matmul", 300_000)  # @tm:lazy-a
    b = LazyArray("add", 200_000)  # @tm:lazy-b
    evaluate([a, b])  # @tm:lazy-c
    memtape.record_memory_events(False)
    allocs = [e for e in memtape.get_memory_events() if e["action"] in ("alloc", "AllocNew")]
    # Innermost is LazyArray.__init__ (where the traceback was captured); its caller is
    # the line that created the array.
    assert {e["frames"][-1][1] for e in allocs if e["op"]} == {
        "test_lazy_arrays_are_attributed_to_their_creation_lines.<locals>.LazyArray.__init__"
    }
    seen = {(e["action"], e["op"], e["frames"][-2][2]) for e in allocs if e["op"]}
    line_a, line_b = line_of(HERE, "lazy-a"), line_of(HERE, "lazy-b")
    assert seen == {
        ("AllocNew", "matmul", line_a),
        ("alloc", "matmul", line_a),
        ("AllocNew", "add", line_b),
        ("alloc", "add", line_b),
    }
    assert all(f[2] != line_of(HERE, "lazy-c") for e in allocs if e["op"] for f in e["frames"])
    for i in range(2):
        memtape.record_allocator_event("Release", 0xB0000 + i * 0x10000, 0)


def test_op_context_nests_and_is_per_thread() -> None:
    memtape.record_memory_events(True, 1000, sources=("framework",))
    other: list[str | None] = []

    def in_thread() -> None:
        memtape.record_allocator_event("AllocNew", 0xC100, 8)
        memtape.record_allocator_event("Release", 0xC100, 0)

    with memtape.op_context("outer"):
        with memtape.op_context("inner"):
            memtape.record_allocator_event("AllocNew", 0xC000, 8)
        t = threading.Thread(target=in_thread)
        t.start()
        t.join()
        memtape.record_allocator_event("Release", 0xC000, 0)
    events = memtape.get_memory_events()
    other = [e["op"] for e in events if e["address"] == 0xC100]
    assert other == [None, None]
    assert [e["op"] for e in events if e["address"] == 0xC000] == ["inner", "outer"]


def test_bad_arguments_raise_clear_errors_and_lose_nothing() -> None:
    memtape.record_memory_events(True, 1000, sources=("framework",))
    memtape.record_allocator_event("AllocNew", 0xD000, 64)
    with pytest.raises(ValueError, match="unknown allocator action 'Nope'"):
        memtape.record_allocator_event("Nope", 0xD000, 64)
    with pytest.raises(ValueError, match="size must be >= 0"):
        memtape.record_allocator_event("AllocNew", 0xE000, -1)
    with pytest.raises(TypeError, match="address must be an integer"):
        memtape.record_allocator_event("AllocNew", "0xE000", 1)
    with pytest.raises(ValueError, match="unknown address 0xe000"):
        memtape.record_allocator_event("FreeActiveToCache", 0xE000, 0)
    with pytest.raises(ValueError, match="already holds a buffer"):
        memtape.record_allocator_event("AllocNew", 0xD000, 64)
    with pytest.raises(ValueError, match=r"is recorded by memtape's own hooks|unknown allocator"):
        memtape.record_allocator_event("alloc", 0xE000, 1)
    stale = memtape.capture_traceback()
    memtape.record_memory_events(True, 1000, sources=("framework",))
    with pytest.raises(ValueError, match="stale traceback id"):
        with memtape.op_context("x", traceback=stale):
            pass
    with pytest.raises(ValueError, match="max_entries must be >= 1"):
        memtape.record_memory_events(True, 0)
    with pytest.raises(ValueError, match="unknown sources"):
        memtape.record_memory_events(True, 10, sources=("gpu",))
    with pytest.raises(TypeError):
        memtape.record_memory_events(True, "many")  # type: ignore[arg-type]
    # The allocator state survived every refusal: the buffer is still active.
    memtape.record_allocator_event("Release", 0xD000, 0)
    assert [e["action"] for e in memtape.get_memory_events()] == ["Release"]


def test_toggling_while_threads_allocate_keeps_the_events() -> None:
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            junk = [bytearray(128) for _ in range(50)]
            del junk

    threads = [threading.Thread(target=churn) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        for _ in range(40):
            memtape.record_memory_events(True, 2000)
            # At least one event, even if the workers get no GIL in time (memtape's own
            # calls are never recorded).
            mine = bytearray(64)
            time.sleep(0.01)  # let the workers run (they need the GIL to allocate)
            memtape.record_memory_events(False)
            del mine
            kept = memtape.get_memory_events()
            time.sleep(0.001)
            # Stopped: nothing is added, nothing kept is lost.
            assert memtape.get_memory_events() == kept
            assert 0 < len(kept) <= 2000
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    events = memtape.get_memory_events()
    assert 0 < len(events) <= 2000
    assert {e["thread"] for e in events} - {threading.get_native_id()}


def test_capture_traceback_is_zero_when_not_recording() -> None:
    assert memtape.capture_traceback() == 0
    memtape.record_memory_events(True, 10)
    assert memtape.capture_traceback() != 0


def _at_depth(depth: int, fn: Callable[[], int]) -> int:
    return fn() if depth <= 1 else _at_depth(depth - 1, fn)


def test_capture_traceback_does_not_read_the_stack_while_not_recording() -> None:
    # Frameworks call it at every array they create: off, it returns at once.
    reads = memtape._native._traceback_stack_reads
    before = reads()
    for depth in (1, 8, 32):
        assert _at_depth(depth, lambda: [memtape.capture_traceback() for _ in range(100)][-1]) == 0
    assert reads() == before
    memtape.record_memory_events(True, 10)
    assert _at_depth(8, memtape.capture_traceback) != 0
    assert reads() == before + 1
    memtape.record_memory_events(False)  # stopped, the kept events readable: off again
    assert _at_depth(8, memtape.capture_traceback) == 0
    assert reads() == before + 1


FORKED_CHILD_EVENTS = """
import json, os, threading
import memtape

memtape.record_memory_events(True, 1000)
before = bytearray(50_000)  # the parent's thread id is cached now
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    memtape.record_memory_events(True, 1000)
    block = bytearray(70_000)
    threads = {e["thread"] for e in memtape.get_memory_events() if e["size"] >= 70_000}
    os.write(write, json.dumps([threading.get_native_id(), sorted(threads)]).encode())
    os._exit(0)
os.close(write)
child, threads = json.loads(os.read(read, 10_000))
os.waitpid(pid, 0)
assert child != threading.get_native_id()
assert threads == [child], (threads, child, threading.get_native_id())
print("ok")
"""


def _prints_ok(tmp_path: Path, source: str) -> None:
    """Runs `source` as a script in a fresh interpreter: it must print "ok" and exit 0."""
    script = tmp_path / "script.py"
    script.write_text(source, encoding="utf-8")
    result = python(script)
    assert result.returncode == 0 and result.stdout.strip() == "ok", describe(result)


def test_a_forked_childs_events_carry_its_own_thread_id(tmp_path: Path) -> None:
    _prints_ok(tmp_path, FORKED_CHILD_EVENTS)


def _unpaired(events: list[dict[str, Any]]) -> list[str]:
    """What is wrong with the Python-heap events' pairing, in order: each free must end a
    block allocated earlier in the recording, with that block's size; no address may begin
    twice without an end between."""
    live: dict[int, int] = {}
    wrong: list[str] = []
    for e in events:
        if e["device"] != -1:
            continue
        if e["action"] == "alloc":
            if e["address"] in live:
                wrong.append(f"{e['address']:#x} allocated twice")
            live[e["address"]] = e["size"]
        elif e["action"] == "free":
            size = live.pop(e["address"], None)
            if size is None or size != e["size"]:
                wrong.append(f"{e['address']:#x} freed with {e['size']} (allocated: {size})")
    return wrong


def _events_threads() -> list[str]:
    tasks = Path("/proc/self/task")
    names = [(t / "comm").read_text().strip() for t in tasks.iterdir()]
    return [n for n in names if n == "memtape-events"]


def test_events_many_batches_long_keep_every_free_paired_with_its_block() -> None:
    # More events than a batch holds before the events thread applies it (32 Ki), from
    # four threads, read while they run and after: every read sees each free with its
    # block's size, and the later read begins with what the earlier one saw.
    memtape.record_memory_events(True, 1_000_000, max_frames=1)
    assert _events_threads() == ["memtape-events"]
    rounds = 600
    start = threading.Barrier(5)
    most = threading.Event()
    read = threading.Event()

    def churn(k: int) -> None:
        start.wait()
        for i in range(rounds):
            blocks = [bytearray(64 + (i + k + j) % 200) for j in range(10)]
            del blocks
            if k == 0 and i == rounds * 3 // 4:
                # The others run on; this one's last quarter comes after the first read.
                most.set()
                read.wait(timeout=60)

    threads = [threading.Thread(target=churn, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    start.wait()
    assert most.wait(timeout=60)
    during = memtape.get_memory_events()
    read.set()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    # Stopped first: this frame's own allocations after a read would be events too.
    memtape.record_memory_events(False)
    after = memtape.get_memory_events()
    # A batch or more handed over before the first read, and again before the second
    # (3.13 allocates half as much a round as 3.11).
    assert len(during) > 32 * 1024 and len(after) > len(during) + 4 * 1024
    assert _unpaired(during) == [] and _unpaired(after) == []
    assert after[: len(during)] == during
    frees = [e for e in after if e["action"] == "free" and e["device"] == -1]
    assert len(frees) > 4 * rounds * 10
    assert memtape._native.memory_event_counts() == (len(after), 0)
    stamps = [e["timestamp_ns"] for e in after]
    assert stamps == sorted(stamps)


FORKED_CHILD_BATCHES = """
import json, os
import memtape

def pairs_ok(events):
    live = {}
    for e in events:
        if e["device"] != -1:
            continue
        if e["action"] == "alloc":
            live[e["address"]] = e["size"]
        elif e["action"] == "free" and live.pop(e["address"], None) != e["size"]:
            return False
    return True

def churn(n):
    for i in range(n):
        blocks = [bytearray(100 + i % 50) for _ in range(10)]
        del blocks

def tasks():
    return sorted(open(f"/proc/self/task/{t}/comm").read().strip()
                  for t in os.listdir("/proc/self/task"))

memtape.record_memory_events(True, 1_000_000, max_frames=1)
churn(1_500)  # a batch or more handed to the events thread
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    # The parent's recording goes on here without its events thread: the child's own
    # threads apply its batches.
    churn(2_500)
    inherited = memtape.get_memory_events()
    threads_then = tasks()
    memtape.record_memory_events(True, 1_000_000, max_frames=1)
    churn(2_500)
    own = memtape.get_memory_events()
    report = [pairs_ok(inherited), len(inherited), threads_then, pairs_ok(own), len(own), tasks()]
    os.write(write, json.dumps(report).encode())
    os._exit(0)
os.close(write)
report = json.loads(os.read(read, 100_000))
os.waitpid(pid, 0)
churn(1_500)
parent = memtape.get_memory_events()
memtape.record_memory_events(False)
ok_inherited, n_inherited, threads_then, ok_own, n_own, threads_after = report
assert ok_inherited and n_inherited > 100_000, report
assert "memtape-events" not in threads_then, threads_then
assert ok_own and n_own > 60_000, report
assert threads_after.count("memtape-events") == 1, threads_after
assert pairs_ok(parent) and len(parent) > 100_000, len(parent)
print("ok")
"""


def test_a_forked_child_records_on_without_the_parents_events_thread(tmp_path: Path) -> None:
    _prints_ok(tmp_path, FORKED_CHILD_BATCHES)


def test_tracemalloc_started_and_cleared_while_recording_keeps_the_frees_events() -> None:
    # The event recorder's blocks are its own: tracemalloc starting, clearing its traces
    # and stopping meanwhile takes no free's size away.
    import memtape.tracemalloc as tm

    memtape.record_memory_events(True, 10_000)
    block = bytearray(77_777)
    tm.start()
    tm.clear_traces()
    del block
    tm.stop()
    events = memtape.get_memory_events()
    allocs = [e for e in ours(events) if e["action"] == "alloc" and e["size"] >= 77_777]
    assert len(allocs) == 1
    frees = [e for e in events if e["action"] == "free" and e["address"] == allocs[0]["address"]]
    assert [e["size"] for e in frees] == [allocs[0]["size"]]
