"""Threads: attribution to the allocating thread, and start/stop under contention."""

from __future__ import annotations

import os
import platform
import sys
import threading
from pathlib import Path
from types import ModuleType

from child_python import describe, run_scenario
from snapshot_views import find_stat, frame_rows
from source_lines import site

MiB = 1024 * 1024
THREADS = 4
SIZE = 2 * MiB


def _here(tag: str) -> tuple[str, int]:
    return site(__file__, tag)


def _thread_allocates(out: list[bytearray], size: int) -> None:
    out.append(bytearray(size))  # @tm:thread-alloc


def test_thread_allocations_are_attributed_to_the_thread_function(tm: ModuleType) -> None:
    tm.start(25)
    out: list[bytearray] = []
    threads = [threading.Thread(target=_thread_allocates, args=(out, SIZE)) for _ in range(THREADS)]
    for thread in threads:
        thread.start()  # @tm:thread-start
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive()
    assert len(out) == THREADS
    stat = find_stat(tm.take_snapshot().statistics("lineno"), (_here("thread-alloc"),))
    assert THREADS * SIZE <= stat.size <= THREADS * SIZE * 1.01
    assert stat.count >= THREADS
    for obj in out:
        tb = tm.get_object_traceback(obj)
        assert tb is not None
        frames = frame_rows(tb)
        assert frames[-1] == _here("thread-alloc")
        # The thread's own stack, rooted in threading's bootstrap: not the main thread's.
        assert os.path.basename(frames[0][0]) == "threading.py"
        assert _here("thread-start") not in frames
        assert all(name != __file__ for name, _ in frames[:-1])


def test_hooks_read_the_current_thread_state_without_a_call() -> None:
    # The hooks load the current thread state themselves (before 3.12 a word of the
    # runtime, from 3.12 on each thread's address of libpython's thread-local), found
    # from the getter's code when they are first installed: every shape on x86-64; on
    # aarch64 from 3.12 on the local-exec load of an interpreter with libpython linked
    # into its executable (Debian's). Where it is not found they still work, through the
    # getter: this says which is in use.
    import memtape.tracemalloc as mtm
    from memtape import _native

    mtm.start(1)
    try:
        direct = _native._reads_thread_state_directly()
        data = [bytearray(100) for _ in range(10)]
        assert mtm.get_object_traceback(data[0]) is not None
    finally:
        mtm.stop()
    # libpython linked into the executable: no libpython*.so is mapped.
    linked_in = "libpython" not in Path("/proc/self/maps").read_text(encoding="utf-8")
    expected = platform.machine() == "x86_64" or (
        platform.machine() == "aarch64" and sys.version_info >= (3, 12) and linked_in
    )
    assert direct == expected


def _short_lived(out: list[bytearray], i: int) -> None:
    out.append(bytearray(1000 + i))  # @tm:short-lived


def test_threads_given_a_finished_threads_stack_are_traced_as_their_own(tm: ModuleType) -> None:
    # glibc hands a new thread the stack (and so the thread pointer, which memtape's
    # hooks look their thread's state up by) of one that finished: each thread must
    # still be traced with its own stack, and its blocks' frees after its exit seen.
    tm.start(25)
    out: list[bytearray] = []
    for i in range(300):
        thread = threading.Thread(target=_short_lived, args=(out, i))
        thread.start()
        thread.join(timeout=60)
        assert not thread.is_alive()
    for obj in out:
        tb = tm.get_object_traceback(obj)
        assert tb is not None, f"block of {len(obj)} bytes not traced"
        frames = frame_rows(tb)
        assert frames[-1] == _here("short-lived")
        assert os.path.basename(frames[0][0]) == "threading.py"
    stat = find_stat(tm.take_snapshot().statistics("lineno"), (_here("short-lived"),))
    assert stat.size >= sum(len(o) for o in out)
    held = tm.get_traced_memory()[0]
    del out
    assert tm.get_traced_memory()[0] <= held - (300 * 1000), "frees after the exits lost"


STRESS = """
import threading

stop_workers = threading.Event()

def worker():
    while not stop_workers.is_set():
        junk = [bytearray(100) for _ in range(50)]  # @tm:stress-worker
        junk.append(list(range(20)))
        del junk

def spawner():
    # Thread creation allocates thread state with the raw allocator, without the GIL.
    while not stop_workers.is_set():
        t = threading.Thread(target=lambda: bytearray(10))
        t.start()
        t.join()

threads = [threading.Thread(target=worker) for _ in range(8)] + [threading.Thread(target=spawner)]
for t in threads:
    t.start()

deadline = time.monotonic() + float(ARGS[0])
cycles = 0
seen_worker = False
while time.monotonic() < deadline or cycles < 3:
    tm.start(1 + cycles % 7)
    for _ in range(3):
        time.sleep(0.002)  # let the workers run while tracing
        snapshot = tm.take_snapshot()
        stats = snapshot.statistics("lineno")
        seen_worker = seen_worker or any(
            s.traceback[0].lineno == line_of("stress-worker") for s in stats)
        current, peak = tm.get_traced_memory()
        assert 0 <= current <= peak, (current, peak)
        tm.reset_peak()
        tm.clear_traces()
    tm.stop()
    assert tm.get_traced_memory() == (0, 0)
    cycles += 1

stop_workers.set()
for t in threads:
    t.join(timeout=30)
    assert not t.is_alive(), "worker did not stop"
assert seen_worker, "no worker allocation was ever traced"
print("ok", cycles)
"""


def test_start_stop_while_threads_allocate(tm_name: str, tmp_path: Path) -> None:
    result = run_scenario(tmp_path, tm_name, STRESS, "2.0", timeout=60)
    assert result.returncode == 0, describe(result)
    assert result.stdout.startswith("ok "), describe(result)
