"""Tracebacks stay exact while the walk reuses the frame chain of the thread's last capture.

Each capture checks the last capture's chain frame by frame (address, instruction pointer,
caller) instead of following it pointer by pointer. These cases change the stack in the
ways that could fool a cache keyed on frame addresses: recursion returning to other
depths, a generator resumed from other callers, one function called from two call sites
whose frames land at the same address, and threads. Every block gets a unique size and is
compared with the stack Python itself reports at the allocating line.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType

import memtape.tracemalloc as tm

Stack = list[tuple[str, int]]


def python_stack(frame: FrameType | None) -> Stack:
    """The frames Python reports, oldest first, as tracemalloc orders them."""
    out: Stack = []
    while frame is not None:
        out.append((frame.f_code.co_filename, frame.f_lineno))
        frame = frame.f_back
    return out[::-1]


class Recorder:
    """Makes blocks of unique sizes and remembers the stack of each."""

    def __init__(self) -> None:
        self.next_size = 100_003
        self.blocks: list[bytes] = []
        self.expected: dict[int, Stack] = {}
        self.lock = threading.Lock()

    def size(self) -> int:
        with self.lock:
            self.next_size += 8
            return self.next_size

    def make(self) -> None:
        size = self.size()
        block, stack = bytes(size), python_stack(sys._getframe())
        self.keep(size, block, stack)

    def keep(self, size: int, block: bytes, stack: Stack) -> None:
        with self.lock:
            self.blocks.append(block)
            # The traced size is the whole object, header included.
            self.expected[sys.getsizeof(block)] = stack


def recurse(rec: Recorder, depth: int) -> None:
    if depth:
        recurse(rec, depth - 1)
        rec.make()
    else:
        rec.make()
        rec.make()


def generator(rec: Recorder) -> Iterator[None]:
    while True:
        size = rec.size()
        block, stack = bytes(size), python_stack(sys._getframe())
        rec.keep(size, block, stack)
        yield


def resume_from_a(gen: Iterator[None]) -> None:
    next(gen)


def resume_from_b(gen: Iterator[None]) -> None:
    next(gen)


def site_one(rec: Recorder) -> None:
    rec.make()


def site_two(rec: Recorder) -> None:
    rec.make()


def workload(rec: Recorder) -> None:
    for depth in (30, 5, 31, 30, 0, 12, 12, 40, 1):
        recurse(rec, depth)
    gen = generator(rec)
    for _ in range(3):
        resume_from_a(gen)
        resume_from_b(gen)
    for _ in range(3):
        site_one(rec)
        site_two(rec)
        rec.make()


def check(rec: Recorder) -> None:
    snapshot = tm.take_snapshot()
    seen = {t.size: t for t in snapshot.traces if t.size in rec.expected}
    assert len(seen) == len(rec.expected)
    for size, stack in rec.expected.items():
        got = [(f.filename, f.lineno) for f in seen[size].traceback]
        assert got == stack, f"block of {size} bytes"


def test_tracebacks_exact_as_the_stack_changes() -> None:
    rec = Recorder()
    tm.start(1000)
    try:
        workload(rec)
        check(rec)
    finally:
        tm.stop()


def test_tracebacks_exact_across_clear_traces() -> None:
    """Clearing forgets every interned stack: the kept chain must be interned again."""
    rec = Recorder()
    tm.start(1000)
    try:
        recurse(rec, 20)
        tm.clear_traces()
        rec.blocks.clear()
        rec.expected.clear()
        recurse(rec, 20)
        workload(rec)
        check(rec)
    finally:
        tm.stop()


def test_tracebacks_exact_in_threads() -> None:
    rec = Recorder()
    tm.start(1000)
    try:
        threads = [threading.Thread(target=workload, args=(rec,)) for _ in range(3)]
        for t in threads:
            t.start()
        workload(rec)
        for t in threads:
            t.join()
        check(rec)
    finally:
        tm.stop()


def make_in_fresh_code(rec: Recorder, round_: int) -> None:
    """Compiles a new function (its padding varies its size and where its call sits),
    calls it at the same stack shape as every other round, and drops it."""
    padding = "    x = 0\n" * (round_ % 7)
    source = f"def fresh(rec):\n{padding}    rec.make()\n"
    namespace: dict[str, object] = {}
    exec(compile(source, f"<fresh {round_}>", "exec"), namespace)
    fresh = namespace.pop("fresh")
    assert callable(fresh)
    fresh(rec)


def test_tracebacks_exact_when_code_objects_are_freed_and_reallocated() -> None:
    """clear_traces releases the code objects: a new one may lie where a freed one was,
    and run in a frame at the same address, while the thread's stack keeps its shape."""
    rec = Recorder()
    tm.start(1000)
    try:
        for round_ in range(300):
            make_in_fresh_code(rec, round_)
            (_, stack), block = rec.expected.popitem(), rec.blocks.pop()
            traceback = tm.get_object_traceback(block)
            assert traceback is not None
            got = [(f.filename, f.lineno) for f in traceback]
            assert got == stack, f"round {round_}"
            tm.clear_traces()
    finally:
        tm.stop()


def alloc_here(size: int) -> bytes:
    return bytes(size)


def call_from_a(size: int) -> bytes:
    return alloc_here(size)


def call_from_b(size: int) -> bytes:
    return alloc_here(size)


def yield_blocks(sizes: list[int]) -> Iterator[bytes]:
    for size in sizes:
        yield bytes(size)


def next_from_a(gen: Iterator[bytes]) -> bytes:
    return next(gen)


def next_from_b(gen: Iterator[bytes]) -> bytes:
    return next(gen)


def callers_of(block: bytes, depth: int) -> list[str]:
    traceback = tm.get_object_traceback(block)
    assert traceback is not None
    lines = [f.lineno for f in traceback][-depth:]
    return [f"{alloc_here.__code__.co_filename}:{line}" for line in lines]


def test_same_innermost_frame_at_the_same_instruction_from_other_callers() -> None:
    """Back-to-back allocations at the same line of a frame at the same address whose
    caller sits at the same address too, but runs other code: the innermost frame alone
    looks unchanged, so the capture must still check the callers (a plain function, then
    a generator resumed from two functions)."""
    pairs = [(call_from_a, call_from_b)[i % 2] for i in range(400)]
    sizes = [300_001 + 8 * i for i in range(400)]
    gen_sizes = [500_001 + 8 * i for i in range(400)]
    resumers = [(next_from_a, next_from_b)[i % 2] for i in range(400)]
    blocks: list[bytes] = []
    gen_blocks: list[bytes] = []
    tm.start(25)
    try:
        for call, size in zip(pairs, sizes, strict=True):
            blocks.append(call(size))
        gen = yield_blocks(gen_sizes)
        for resume in resumers:
            gen_blocks.append(resume(gen))
        file = alloc_here.__code__.co_filename

        def line_of(fn: Callable[..., object], offset: int) -> str:
            return f"{file}:{fn.__code__.co_firstlineno + offset}"

        for i, block in enumerate(blocks):
            caller = (call_from_a, call_from_b)[i % 2]
            assert callers_of(block, 2) == [line_of(caller, 1), line_of(alloc_here, 1)], i
        for i, block in enumerate(gen_blocks):
            resumer = (next_from_a, next_from_b)[i % 2]
            assert callers_of(block, 2) == [line_of(resumer, 1), line_of(yield_blocks, 2)], i
    finally:
        tm.stop()
