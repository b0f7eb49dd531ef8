"""The traceback limit: its range, argument errors, and very deep stacks."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from types import ModuleType

import pytest
from snapshot_views import find_stat, frame_rows
from source_lines import site

RANGE_MESSAGE = "the number of frames must be in range [1; 65535]"
DEPTH = 1500


def _here(tag: str) -> tuple[str, int]:
    return site(__file__, tag)


def _raised(call: Callable[[], object]) -> tuple[type[BaseException], str]:
    try:
        call()
    except Exception as exc:
        return type(exc), str(exc)
    raise AssertionError("no exception raised")


def _caller_depth() -> int:
    frame = sys._getframe(1)
    depth = 0
    while frame is not None:
        depth += 1
        frame = frame.f_back  # type: ignore[assignment]
    return depth


@pytest.mark.parametrize("nframe", [1, 2, 65535, True])
def test_start_accepts_the_whole_range(tm: ModuleType, nframe: int) -> None:
    tm.start(nframe)
    assert tm.is_tracing()
    assert tm.get_traceback_limit() == nframe
    assert type(tm.get_traceback_limit()) is int


@pytest.mark.parametrize("nframe", [0, -1, 65536])
def test_start_rejects_values_out_of_range(tm: ModuleType, nframe: int) -> None:
    with pytest.raises(ValueError) as info:
        tm.start(nframe)
    assert str(info.value) == RANGE_MESSAGE
    assert not tm.is_tracing()


@pytest.mark.parametrize("nframe", [0, -1, 65536, -(2**31) - 1, 2**31, 2**64, "x", 1.5, None, b"3"])
def test_start_errors_match_the_reference(
    tm: ModuleType, stdlib_tm: ModuleType, nframe: object
) -> None:
    expected = _raised(lambda: stdlib_tm.start(nframe))
    assert not stdlib_tm.is_tracing()
    assert _raised(lambda: tm.start(nframe)) == expected
    assert not tm.is_tracing()


def test_start_rejects_a_string(tm: ModuleType) -> None:
    with pytest.raises(TypeError):
        tm.start("x")
    assert not tm.is_tracing()


def test_start_takes_one_positional_argument(tm: ModuleType) -> None:
    # Only the exception type is compared: the stdlib message names `_tracemalloc`.
    with pytest.raises(TypeError):
        tm.start(nframe=5)
    with pytest.raises(TypeError):
        tm.start(1, 2)
    assert not tm.is_tracing()


def _recurse(n: int) -> bytearray:
    if n == 0:
        return bytearray(1000)  # @tm:deep-bottom
    return _recurse(n - 1)  # @tm:deep-call


@pytest.fixture
def deep_recursion_allowed() -> Iterator[None]:
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, _caller_depth() + DEPTH + 1000))
    yield
    sys.setrecursionlimit(old)


@pytest.mark.parametrize("limit", [65535, 1])
@pytest.mark.usefixtures("deep_recursion_allowed")
def test_deep_recursion_counts_every_frame(tm: ModuleType, limit: int) -> None:
    tm.start(limit)
    depth = _caller_depth() + DEPTH + 1  # _recurse(DEPTH) ... _recurse(0)
    obj = _recurse(DEPTH)
    tb = tm.get_object_traceback(obj)
    assert tb is not None
    assert len(tb) == min(limit, depth)
    assert frame_rows(tb)[-1] == _here("deep-bottom")
    snapshot = tm.take_snapshot()
    bottom = snapshot.filter_traces([tm.Filter(True, __file__, _here("deep-bottom")[1])])
    assert len(bottom.traces) >= 1
    for trace in bottom.traces:
        assert trace.traceback.total_nframe == depth
        assert len(trace.traceback) == min(limit, depth)
    if limit > 1:
        assert frame_rows(tb)[-DEPTH - 1 : -1] == (_here("deep-call"),) * DEPTH
        # cumulative statistics count the trace once per frame: DEPTH times here.
        stat = find_stat(bottom.statistics("lineno", cumulative=True), (_here("deep-call"),))
        assert stat.count == DEPTH * len(bottom.traces)
        assert stat.size == DEPTH * sum(t.size for t in bottom.traces)
    assert bottom.statistics("traceback")[0].count == len(bottom.traces)
    tm.stop()
    assert not tm.is_tracing()
