"""Tracebacks stay exact while the walk reuses the frame chain of the thread's last capture.

Each capture checks the last capture's chain frame by frame (address, instruction pointer,
caller) instead of following it pointer by pointer. These cases change the stack in the
ways that could fool a cache keyed on frame addresses: recursion returning to other
depths, a generator resumed from other callers, one function called from two call sites
whose frames land at the same address, and threads. Every block gets a unique size and is
compared with the stack Python itself reports at the allocating line.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import memtape.tracemalloc as tm
from memtape_cli import ok, python, write_program

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


def two_lines(size: int) -> tuple[bytes, bytes]:
    first = bytes(size)
    second = bytes(size + 4)
    return first, second


def two_other_lines(size: int) -> tuple[bytes, bytes]:
    first = bytes(size)
    second = bytes(size + 4)
    return first, second


def one_call_site(fn: Callable[[int], tuple[bytes, bytes]], size: int) -> tuple[bytes, bytes]:
    return fn(size)


def via_a(fn: Callable[[int], tuple[bytes, bytes]], size: int) -> tuple[bytes, bytes]:
    return one_call_site(fn, size)


def via_b(fn: Callable[[int], tuple[bytes, bytes]], size: int) -> tuple[bytes, bytes]:
    return one_call_site(fn, size)


def test_the_next_line_of_a_frame_that_may_be_another_one() -> None:
    """Allocations at two lines of one frame: the second is the first's stack with the
    innermost frame moved on. Between pairs, the frame at that address is a new one, run
    from one call site whose own caller alternates, and running one of two functions: a
    capture that only compared the innermost frame's address and caller would put blocks
    on the wrong function's lines or under the wrong caller."""
    plan = [((via_a, via_b)[i % 2], (two_lines, two_other_lines)[(i // 2) % 2]) for i in range(400)]
    sizes = [700_001 + 16 * i for i in range(400)]
    pairs: list[tuple[bytes, bytes]] = []
    tm.start(25)
    try:
        for (via, fn), size in zip(plan, sizes, strict=True):
            pairs.append(via(fn, size))
        file = two_lines.__code__.co_filename

        def line_of(fn: Callable[..., object], offset: int) -> str:
            return f"{file}:{fn.__code__.co_firstlineno + offset}"

        for i, ((via, fn), (first, second)) in enumerate(zip(plan, pairs, strict=True)):
            outer = [line_of(via, 1), line_of(one_call_site, 1)]
            assert callers_of(first, 3) == [*outer, line_of(fn, 1)], i
            assert callers_of(second, 3) == [*outer, line_of(fn, 2)], i
    finally:
        tm.stop()


def with_cell(size: int) -> Callable[[], bytes]:
    block = bytes(size)

    def inner() -> bytes:
        return block

    return inner


def with_other_cell(size: int) -> Callable[[], bytes]:
    other = bytes(size)

    def inner() -> bytes:
        return other

    return inner


def closures_at_one_call_site(sizes: list[int]) -> list[Callable[[], bytes]]:
    """One closure per size, made by each function twice in turn, from one call instruction
    (the loop allocates nothing else: small ints are cached, the list is made first)."""
    makers = (with_cell, with_other_cell)
    out: list[Callable[[], bytes]] = [with_cell] * len(sizes)
    for i in range(len(sizes)):
        out[i] = makers[i // 2 % 2](sizes[i])
    return out


def cell_tracebacks(module: object) -> list[list[tuple[str, int]]]:
    """Where each closure's cell was allocated, as tracer `module` reports it. Each cell is
    made before its function's first traceable instruction, in a frame at the same address
    as the last allocation's, under the same caller at the same instruction, the frame
    before running the same code or the other function."""
    sizes = [900_001 + 16 * i for i in range(200)]
    module.start(25)  # type: ignore[attr-defined]
    try:
        closures = closures_at_one_call_site(sizes)
        out = []
        for fn in closures:
            assert fn.__closure__ is not None
            tb = module.get_object_traceback(fn.__closure__[0])  # type: ignore[attr-defined]
            assert tb is not None
            out.append([(f.filename, f.lineno) for f in tb][-2:])
        return out
    finally:
        module.stop()  # type: ignore[attr-defined]


def test_an_allocation_before_the_first_traceable_instruction_of_a_new_frame() -> None:
    """A closure cell is allocated while its frame is still incomplete: like the stdlib,
    the traceback must end at the caller's line, although the last allocation was made in
    a complete frame at the same address under the same caller."""
    import tracemalloc as stdlib

    expected = cell_tracebacks(stdlib)
    assert cell_tracebacks(tm) == expected
    # The stdlib leaves the incomplete frame out: the innermost line is the caller's.
    code = closures_at_one_call_site.__code__
    assert {tb[-1] for tb in expected} == {(code.co_filename, code.co_firstlineno + 6)}


MODULE_LEVEL = """
import json, sys
import memtape.tracemalloc as tm

def stack(frame):
    out = []
    while frame is not None:
        out.append((frame.f_code.co_filename, frame.f_lineno))
        frame = frame.f_back
    return out[::-1]

def inner(size):
    return bytes(size), stack(sys._getframe())

blocks, expected = [], {}
size = 100_003
tm.start(25)
for i in range(400):
    size += 8; b = bytes(size); expected[sys.getsizeof(b)] = stack(sys._getframe())
    blocks.append(b)
    size += 8
    if i % 3 == 0:
        b, s = inner(size); expected[sys.getsizeof(b)] = s
    elif i % 3 == 1:
        b = bytes(size); expected[sys.getsizeof(b)] = stack(sys._getframe())
    else:
        exec("b = bytes(size); expected[sys.getsizeof(b)] = stack(sys._getframe())")
    blocks.append(b)
    small = [[j] for j in range(8)]  # other module-level lines allocate in between
    size += 8; b = bytes(size); expected[sys.getsizeof(b)] = stack(sys._getframe())
    blocks.append(b)
snapshot = tm.take_snapshot()
tm.stop()
seen = {t.size: [[f.filename, f.lineno] for f in t.traceback] for t in snapshot.traces}
print(json.dumps([[seen.get(size), [list(f) for f in s]] for size, s in expected.items()]))
"""


def test_module_level_code_of_a_script(tmp_path: Path) -> None:
    """A script's module frame has no caller (3.11: a null `previous`): its allocations
    take the repeat path with nothing behind the frame to verify, and stay exact as the
    line moves, as calls and exec() frames come and go above it."""
    script = write_program(tmp_path / "module_level.py", MODULE_LEVEL)
    pairs = json.loads(ok(python(script)).stdout.strip().splitlines()[-1])
    assert len(pairs) == 1200
    for got, want in pairs:
        assert got == want
