"""Plain-data views of tracemalloc objects, to compare two implementations.

The stdlib classes compare equal only to instances of the same class, so results from
``tracemalloc`` and ``memtape.tracemalloc`` are compared through these views: tuples of
ints and strings, in the order the implementation returned them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

FrameRow = tuple[str, int]
TraceRow = tuple[int, int, tuple[FrameRow, ...], Any]
StatRow = tuple[tuple[FrameRow, ...], int, int]
DiffRow = tuple[tuple[FrameRow, ...], int, int, int, int]


def frame_rows(traceback: Iterable[Any]) -> tuple[FrameRow, ...]:
    """A Traceback's frames as ``(filename, lineno)``, oldest first (its own order)."""
    return tuple((frame.filename, frame.lineno) for frame in traceback)


def trace_rows(snapshot: Any) -> list[TraceRow]:
    """``(domain, size, frames, total_nframe)`` for every trace of a Snapshot."""
    return [
        (t.domain, t.size, frame_rows(t.traceback), t.traceback.total_nframe)
        for t in snapshot.traces
    ]


def stat_rows(statistics: Iterable[Any]) -> list[StatRow]:
    """``(frames, size, count)`` for each Statistic, in the given order."""
    return [(frame_rows(s.traceback), s.size, s.count) for s in statistics]


def diff_rows(diffs: Iterable[Any]) -> list[DiffRow]:
    """``(frames, size, size_diff, count, count_diff)`` for each StatisticDiff."""
    return [(frame_rows(d.traceback), d.size, d.size_diff, d.count, d.count_diff) for d in diffs]


def find_stat(statistics: Iterable[Any], frames: tuple[FrameRow, ...]) -> Any:
    """The Statistic whose traceback is exactly ``frames``; AssertionError if none."""
    for stat in statistics:
        if frame_rows(stat.traceback) == frames:
            return stat
    raise AssertionError(f"no statistic for {frames}")
