"""The stack floor: ``_call_as_program_with_floor`` (the pytest plugin's call of a
test) ends the stacks its thread captures at the calling frame while
only a capture file records, instead of walking every runner frame outside it at every
allocation. The floor comes back to the one before when the call ends (nested calls, an
exception leaving one), other threads keep their whole stacks, and tracemalloc and the
event recorder started inside such a call see every frame.

Each program runs in a child that records a capture in process (no ``launcher_files``:
its stacks are shown as recorded, frame by frame) and prints what it found as JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from child_python import describe
from memtape_cli import python, write_program

PRELUDE = """
import json
import sys
import threading

import memtape
import memtape.tracemalloc as tracemalloc
from memtape import _native

path = sys.argv[1]
keep = []
found = {}


def capture_stacks():
    '''The function names of each stack the capture holds blocks of (innermost first).'''
    capture = _native.analyze_capture(path, time_window=False)
    sites = capture.sites(by="traceback", at="end", limit=10_000, max_frames=10_000)
    return [[function for _file, function, _line in frames] for frames, _, _ in sites]
"""

DEEP = """
def deep(n):
    if n:
        return deep(n - 1)
    return leaf_deep()


def leaf_deep():
    keep.append(bytearray(10_000))


def floored_caller():
    _native._call_as_program_with_floor(deep, 200)


def whole_caller():
    keep.append(bytearray(10_000))  # the same frames before the call: a repeated walk
    _native._call_as_program(deep_whole, 200)


def deep_whole(n):
    if n:
        return deep_whole(n - 1)
    return leaf_whole()


def leaf_whole():
    keep.append(bytearray(10_000))


_native._start_capture(path, "{}", 0, False)
floored_caller()
whole_caller()
_native._stop_capture()
print(json.dumps(capture_stacks()))
"""


def run(tmp_path: Path, body: str, *args: str) -> Any:
    script = write_program(tmp_path / "floor.py", PRELUDE + body)
    result = python(script, tmp_path / "floor.mtape", *args)
    assert result.returncode == 0, describe(result)
    return json.loads(result.stdout.strip().splitlines()[-1])


def by_innermost(stacks: list[list[str]]) -> dict[str, list[list[str]]]:
    """The stacks by the name of their innermost function."""
    found: dict[str, list[list[str]]] = {}
    for stack in stacks:
        if stack:
            found.setdefault(stack[0], []).append(stack)
    return found


def test_a_deep_stack_ends_at_the_calling_frame(tmp_path: Path) -> None:
    stacks = by_innermost(run(tmp_path, DEEP))
    # 201 frames of the recursion and the frame that made the call: nothing outside it.
    assert stacks["leaf_deep"] == [["leaf_deep", *["deep"] * 201, "floored_caller"]]
    # ``_call_as_program`` walks the whole stack, as before.
    whole = ["leaf_whole", *["deep_whole"] * 201, "whole_caller", "<module>"]
    assert stacks["leaf_whole"] == [whole]


NESTED = """
def outer():
    inner_caller()
    leaf_outer()


def inner_caller():
    _native._call_as_program_with_floor(inner)


def inner():
    keep.append(bytearray(10_000))


def leaf_outer():
    keep.append(bytearray(10_000))


def outer_caller():
    _native._call_as_program_with_floor(outer)


def raises():
    keep.append(bytearray(10_000))
    raise ValueError("from the call")


def raising_caller():
    try:
        _native._call_as_program_with_floor(raises)
    except ValueError:
        after_exception()


def after_exception():
    keep.append(bytearray(10_000))


def after_calls():
    keep.append(bytearray(10_000))


def other_thread():
    keep.append(bytearray(10_000))


def starts_thread():
    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    in_floored_call()


def in_floored_call():
    keep.append(bytearray(10_000))


def thread_caller():
    _native._call_as_program_with_floor(starts_thread)


_native._start_capture(path, "{}", 0, False)
outer_caller()
raising_caller()
after_calls()
thread_caller()
_native._stop_capture()
print(json.dumps(capture_stacks()))
"""


def test_a_nested_call_restores_the_floor_and_an_exception_clears_it(tmp_path: Path) -> None:
    stacks = {s[0]: s for s in run(tmp_path, NESTED) if s}
    assert stacks["inner"] == ["inner", "inner_caller"]
    # Back in the outer call: its own floor again (neither none nor the inner one).
    assert stacks["leaf_outer"] == ["leaf_outer", "outer", "outer_caller"]
    assert stacks["raises"] == ["raises", "raising_caller"]
    # The exception left the call: the caller's handler and what follows walk it all.
    assert stacks["after_exception"] == ["after_exception", "raising_caller", "<module>"]
    assert stacks["after_calls"] == ["after_calls", "<module>"]
    # Another thread started inside a floored call keeps its whole stack.
    assert stacks["other_thread"] == [
        "other_thread",
        "Thread.run",
        "Thread._bootstrap_inner",
        "Thread._bootstrap",
    ]
    assert stacks["in_floored_call"] == ["in_floored_call", "starts_thread", "thread_caller"]


INSIDE = """
def loop(kind):
    # The same lines before, during and after the other recording: each thread's cache of
    # its last walk must not carry one stack into the other state.
    for turn in range(3):
        if turn == 1:
            start(kind)
        keep.append(bytearray(10_000))
        obj = bytearray(20_000)
        keep.append(obj)
        if turn == 1:
            found[kind] = stop(kind, obj)
        if turn == 2:
            leaf_after_stop()


def leaf_after_stop():
    keep.append(bytearray(10_000))


def start(kind):
    if kind == "tracemalloc":
        tracemalloc.start(500)
    else:
        memtape.record_memory_events(True, 100_000, max_frames=500)


def stop(kind, obj):
    if kind == "tracemalloc":
        names = [f.filename for f in tracemalloc.get_object_traceback(obj)]
        tracemalloc.stop()
        return len(names)
    events = [e for e in memtape.get_memory_events() if e["size"] >= 20_000]
    memtape.record_memory_events(False)
    return [function for _file, function, _line in events[-1]["frames"]]


def deep(n, kind):
    if n:
        return deep(n - 1, kind)
    return loop(kind)


def floored_caller(kind):
    _native._call_as_program_with_floor(deep, 60, kind)


def after(kind):
    obj = bytearray(30_000)
    keep.append(obj)


_native._start_capture(path, "{}", 0, False)
floored_caller(sys.argv[2])
after(sys.argv[2])
_native._stop_capture()
found["capture"] = capture_stacks()
print(json.dumps(found))
"""


@pytest.mark.parametrize("kind", ["tracemalloc", "events"])
def test_tracemalloc_and_events_started_inside_see_whole_stacks(tmp_path: Path, kind: str) -> None:
    found = run(tmp_path, INSIDE, kind)
    whole = ["loop", *["deep"] * 61, "floored_caller", "<module>"]
    if kind == "tracemalloc":
        # tracemalloc's traceback: every frame down to the module's.
        assert found["tracemalloc"] == len(whole)
    else:
        assert found["events"] == whole[::-1], found["events"]
    stacks = by_innermost(found["capture"])
    floored = ["loop", *["deep"] * 61, "floored_caller"]
    # The capture shares the other recording's stacks while it records (whole), and ends
    # them at the floor before and after it.
    assert floored in stacks["loop"]
    assert whole in stacks["loop"]
    assert stacks["leaf_after_stop"] == [["leaf_after_stop", *floored]]
    assert stacks["after"] == [["after", "<module>"]]


EXEC = """
PROGRAM = '''
def program_leaf():
    keep.append(bytearray(10_000))


def nested_exec():
    # Recorded code that runs more code as the program's: a plain exec, under the floor
    # of the run it is part of.
    code = compile("keep.append(bytearray(10_000))", "n.py", "exec")
    _native._exec_as_program(code, {"keep": keep})


program_leaf()
nested_exec()
'''


def runner(source):
    token = _native._own_work_begin()  # as `memtape run`: the runner's work is its own
    try:
        code = compile(source, "program.py", "exec")
        _native._exec_as_program(code, {"keep": keep, "_native": _native})
    finally:
        _native._work_end(token)


def after_run():
    keep.append(bytearray(10_000))


def after_raise():
    keep.append(bytearray(10_000))


_native._start_capture(path, "{}", 0, False)
runner(PROGRAM)
after_run()
try:
    runner("keep.append(bytearray(10_000))\\nraise KeyError")
except KeyError:
    after_raise()
_native._stop_capture()
print(json.dumps(capture_stacks()))
"""


def test_exec_as_program_ends_the_programs_stacks_at_its_caller(tmp_path: Path) -> None:
    # `memtape run` (and the notebook magics) run the program's code through
    # `_exec_as_program`: its stacks end at the runner's frame, whose launcher frames
    # outside it no report shows, instead of walking them at every allocation.
    stacks = run(tmp_path, EXEC)
    assert ["program_leaf", "<module>", "runner"] in stacks
    assert ["<module>", "nested_exec", "<module>", "runner"] in stacks
    assert stacks.count(["<module>", "runner"]) >= 1  # the raising code's allocation
    # Nothing outside the runner's frame while the program ran, and the whole stack again
    # once it returned or raised.
    assert all(s.index("runner") == len(s) - 1 for s in stacks if "runner" in s), stacks
    by_name = by_innermost(stacks)
    # (3.12 allocates on a function's first line too: a site of its own, the same frames.)
    for name in ("after_run", "after_raise"):
        assert by_name[name], name
        assert all(s == [name, "<module>"] for s in by_name[name]), by_name[name]
