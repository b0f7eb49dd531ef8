"""Tracebacks: frame order, line numbers, total_nframe, format(), truncation."""

from __future__ import annotations

import linecache
import sys
from types import ModuleType
from typing import Any

from snapshot_views import frame_rows
from source_lines import site

SIZE = 4096


def _here(tag: str) -> tuple[str, int]:
    return site(__file__, tag)


def _inner() -> bytearray:
    return bytearray(SIZE)  # @tm:tb-inner


def _middle() -> bytearray:
    return _inner()  # @tm:tb-middle


def _outer() -> bytearray:
    return _middle()  # @tm:tb-outer


def _caller_depth() -> int:
    """Number of Python frames on the stack of the caller, the caller included."""
    frame = sys._getframe(1)
    depth = 0
    while frame is not None:
        depth += 1
        frame = frame.f_back  # type: ignore[assignment]
    return depth


def _traces_at(snapshot: Any, where: tuple[str, int]) -> list[Any]:
    return [t for t in snapshot.traces if frame_rows(t.traceback)[-1:] == (where,)]


def _expected_format(frames: tuple[tuple[str, int], ...]) -> list[str]:
    lines = []
    for filename, lineno in frames:
        lines.append(f'  File "{filename}", line {lineno}')
        source = linecache.getline(filename, lineno).strip()
        if source:
            lines.append(f"    {source}")
    return lines


def test_object_traceback_lists_frames_oldest_first(tm: ModuleType) -> None:
    tm.start(25)
    depth = _caller_depth() + 3
    obj = _outer()  # @tm:tb-test
    tb = tm.get_object_traceback(obj)
    assert tb is not None
    frames = frame_rows(tb)
    assert frames[-4:] == (
        _here("tb-test"),
        _here("tb-outer"),
        _here("tb-middle"),
        _here("tb-inner"),
    )
    assert len(tb) == min(25, depth)
    assert (tb[-1].filename, tb[-1].lineno) == _here("tb-inner")
    assert str(tb) == str(tb[0]) == f"{frames[0][0]}:{frames[0][1]}"
    assert tm.Frame(_here("tb-inner")) in tb


def test_snapshot_trace_counts_the_whole_stack(tm: ModuleType) -> None:
    tm.start(25)
    depth = _caller_depth() + 3
    obj = _outer()
    snapshot = tm.take_snapshot()
    traces = _traces_at(snapshot, _here("tb-inner"))
    assert traces, "no trace for the allocating line"
    assert sum(t.size for t in traces) == sys.getsizeof(obj)
    for trace in traces:
        assert trace.domain == 0
        assert trace.traceback.total_nframe == depth
        assert len(trace.traceback) == min(25, depth)
        assert frame_rows(trace.traceback) == frame_rows(tm.get_object_traceback(obj))
        assert repr(trace.traceback).endswith(f" total_nframe={depth}>")
    assert snapshot.traceback_limit == 25


def test_object_traceback_has_no_total_nframe(tm: ModuleType) -> None:
    tm.start(25)
    obj = _outer()
    tb = tm.get_object_traceback(obj)
    assert tb is not None
    assert tb.total_nframe is None


def test_format_renders_file_line_and_source(tm: ModuleType) -> None:
    tm.start(25)
    obj = _outer()  # @tm:format-test
    tb = tm.get_object_traceback(obj)
    assert tb is not None
    frames = frame_rows(tb)
    assert tb.format() == _expected_format(frames)
    inner_file, inner_line = _here("tb-inner")
    assert tb.format(limit=1) == [
        f'  File "{inner_file}", line {inner_line}',
        "    return bytearray(SIZE)  # @tm:tb-inner",
    ]
    assert tb.format(limit=2) == _expected_format(frames[-2:])
    # The docs promise "the abs(limit) oldest frames"; the stdlib code slices
    # self[:limit], i.e. drops the abs(limit) most recent ones. Match the code.
    assert tb.format(limit=-1) == _expected_format(frames[:-1])
    assert tb.format(limit=0) == []
    assert tb.format(limit=2, most_recent_first=True) == _expected_format(
        (_here("tb-inner"), _here("tb-middle"))
    )
    assert tb.format(most_recent_first=True) == _expected_format(tuple(reversed(frames)))


def test_nframe_truncation_keeps_the_most_recent_frames(tm: ModuleType) -> None:
    tm.start(2)
    depth = _caller_depth() + 3
    obj = _outer()
    tb = tm.get_object_traceback(obj)
    assert tb is not None
    assert frame_rows(tb) == (_here("tb-middle"), _here("tb-inner"))
    traces = _traces_at(tm.take_snapshot(), _here("tb-inner"))
    assert traces
    for trace in traces:
        assert frame_rows(trace.traceback) == (_here("tb-middle"), _here("tb-inner"))
        assert trace.traceback.total_nframe == depth


def test_limit_one_keeps_only_the_allocating_frame(tm: ModuleType) -> None:
    tm.start(1)
    obj = _outer()
    tb = tm.get_object_traceback(obj)
    assert tb is not None
    assert frame_rows(tb) == (_here("tb-inner"),)


def test_untraced_objects_have_no_traceback(tm: ModuleType) -> None:
    before = bytearray(SIZE)
    assert tm.get_object_traceback(before) is None  # not tracing
    tm.start(5)
    assert tm.get_object_traceback(before) is None  # allocated before start()
    assert tm.get_object_traceback(None) is None  # static object
    after = bytearray(SIZE)
    assert tm.get_object_traceback(after) is not None
    tm.stop()
    assert tm.get_object_traceback(after) is None
