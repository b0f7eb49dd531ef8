"""The pure-Python layer on synthetic traces: same results as the stdlib, item by item."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

import pytest
from snapshot_views import diff_rows, frame_rows, stat_rows, trace_rows

# (domain, size, frames most recent first, total_nframe), as _tracemalloc returns them.
OLD_TRACES = [
    (0, 10, (("a.py", 2), ("b.py", 4)), 3),
    (0, 10, (("a.py", 2), ("b.py", 4)), 3),
    (0, 10, (("a.py", 5), ("b.py", 4)), 3),
    (1, 2, (("a.py", 5), ("b.py", 4)), 3),
    (2, 66, (("b.py", 1),), 1),
    (3, 7, (("<unknown>", 0),), 1),
]
NEW_TRACES = [
    (0, 10, (("a.py", 2), ("b.py", 4)), 3),
    (0, 5000, (("a.py", 5), ("b.py", 4)), 3),
    (2, 66, (("b.py", 1),), 1),
    (0, 123, (("c.py", 578), ("a.py", 5), ("a.py", 5), ("a.py", 5)), 40),
    (4, 1, (("lib/d.pyc", 9),), 1),
]

KEYS = [("lineno", False), ("filename", False), ("traceback", False)]
KEYS += [("lineno", True), ("filename", True)]


def _pair(tm: ModuleType, reference: ModuleType, traces: list[Any]) -> tuple[Any, Any]:
    return tm.Snapshot(traces, 4), reference.Snapshot(traces, 4)


def test_snapshot_exposes_traces_and_limit(tm: ModuleType, stdlib_tm: ModuleType) -> None:
    ours, ref = _pair(tm, stdlib_tm, NEW_TRACES)
    assert trace_rows(ours) == trace_rows(ref)
    assert ours.traceback_limit == 4
    assert len(ours.traces) == len(NEW_TRACES)
    first = ours.traces[0]
    assert (first.domain, first.size) == (0, 10)
    assert frame_rows(first.traceback) == (("b.py", 4), ("a.py", 2))
    assert first.traceback.total_nframe == 3
    assert first in ours.traces
    assert isinstance(ours.traces[1:3], tuple) and len(ours.traces[1:3]) == 2
    assert [str(t) for t in ours.traces] == [str(t) for t in ref.traces]
    assert [repr(t) for t in ours.traces] == [repr(t) for t in ref.traces]
    assert repr(ours.traces) == repr(ref.traces)


@pytest.mark.parametrize(("key", "cumulative"), KEYS)
def test_statistics_match_the_reference(
    tm: ModuleType, stdlib_tm: ModuleType, key: str, cumulative: bool
) -> None:
    ours, ref = _pair(tm, stdlib_tm, NEW_TRACES)
    got = ours.statistics(key, cumulative)
    want = ref.statistics(key, cumulative)
    assert stat_rows(got) == stat_rows(want)
    assert [str(s) for s in got] == [str(s) for s in want]
    assert [repr(s) for s in got] == [repr(s) for s in want]


@pytest.mark.parametrize(("key", "cumulative"), KEYS)
def test_compare_to_matches_the_reference(
    tm: ModuleType, stdlib_tm: ModuleType, key: str, cumulative: bool
) -> None:
    new, ref_new = _pair(tm, stdlib_tm, NEW_TRACES)
    old, ref_old = _pair(tm, stdlib_tm, OLD_TRACES)
    got = new.compare_to(old, key, cumulative)
    want = ref_new.compare_to(ref_old, key, cumulative)
    assert diff_rows(got) == diff_rows(want)
    assert [str(d) for d in got] == [str(d) for d in want]
    assert [repr(d) for d in got] == [repr(d) for d in want]


FILTERS: dict[str, Callable[[ModuleType], Iterable[Any]]] = {
    "none": lambda m: [],
    "include-file": lambda m: [m.Filter(True, "a.py")],
    "exclude-file": lambda m: [m.Filter(False, "a.py")],
    "include-line": lambda m: [m.Filter(True, "a.py", 5)],
    "include-line-zero": lambda m: [m.Filter(True, "<unknown>", 0)],
    "exclude-all-frames": lambda m: [m.Filter(False, "b.py", all_frames=True)],
    "include-all-frames": lambda m: [m.Filter(True, "b.py", all_frames=True)],
    "glob": lambda m: [m.Filter(True, "*.py")],
    "pyc-normalized": lambda m: [m.Filter(True, "lib/d.pyc")],
    "include-domain": lambda m: [m.Filter(True, "a.py", domain=1)],
    "exclude-domain": lambda m: [m.Filter(False, "a.py", domain=0)],
    "domain-filter": lambda m: [m.DomainFilter(True, 2)],
    "not-domain-filter": lambda m: [m.DomainFilter(False, 0)],
    "mixed": lambda m: [m.Filter(True, "a.py"), m.Filter(True, "b.py"), m.Filter(False, "*", 2)],
    "generator": lambda m: (f for f in [m.Filter(True, "b.py")]),
}


@pytest.mark.parametrize("name", list(FILTERS))
def test_filter_traces_matches_the_reference(
    tm: ModuleType, stdlib_tm: ModuleType, name: str
) -> None:
    ours, ref = _pair(tm, stdlib_tm, OLD_TRACES + NEW_TRACES)
    got = ours.filter_traces(FILTERS[name](tm))
    want = ref.filter_traces(FILTERS[name](stdlib_tm))
    assert trace_rows(got) == trace_rows(want)
    assert got.traceback_limit == 4
    assert got is not ours
    assert len(ours.traces) == len(OLD_TRACES + NEW_TRACES)  # the original is unchanged


def test_filter_attributes(tm: ModuleType) -> None:
    f = tm.Filter(True, "lib/d.pyc")
    assert (f.inclusive, f.filename_pattern, f.lineno, f.all_frames, f.domain) == (
        True,
        "lib/d.py",
        None,
        False,
        None,
    )
    g = tm.Filter(False, "x.py", 3, True, 7)
    assert (g.inclusive, g.filename_pattern, g.lineno, g.all_frames, g.domain) == (
        False,
        "x.py",
        3,
        True,
        7,
    )
    g.lineno = 4  # writable, unlike filename_pattern
    g.all_frames = False
    assert (g.lineno, g.all_frames) == (4, False)
    d = tm.DomainFilter(False, 5)
    assert (d.inclusive, d.domain) == (False, 5)


def test_frame_and_traceback_value_semantics(tm: ModuleType, stdlib_tm: ModuleType) -> None:
    frame = tm.Frame(("a.py", 3))
    assert (frame.filename, frame.lineno) == ("a.py", 3)
    assert str(frame) == "a.py:3"
    assert repr(frame) == repr(stdlib_tm.Frame(("a.py", 3)))
    assert frame == tm.Frame(("a.py", 3)) and hash(frame) == hash(tm.Frame(("a.py", 3)))
    assert tm.Frame(("a.py", 2)) < frame < tm.Frame(("b.py", 1))
    raw = (("a.py", 3), ("b.py", 1))  # most recent first
    tb = tm.Traceback(raw, 7)
    assert frame_rows(tb) == (("b.py", 1), ("a.py", 3))
    assert tb.total_nframe == 7 and tm.Traceback(raw).total_nframe is None
    assert tb == tm.Traceback(raw) and hash(tb) == hash(tm.Traceback(raw))
    assert tm.Traceback((("a.py", 1),)) < tm.Traceback((("a.py", 2),))
    assert str(tb) == "b.py:1"
    assert repr(tb) == repr(stdlib_tm.Traceback(raw, 7))
    assert repr(tm.Traceback(raw)) == repr(stdlib_tm.Traceback(raw))
    assert isinstance(tb[0:1], tuple) and tb[-1] == frame
    assert frame in tb and tm.Frame(("c.py", 1)) not in tb
    assert tb.format() == stdlib_tm.Traceback(raw, 7).format()


def test_statistic_value_semantics(tm: ModuleType, stdlib_tm: ModuleType) -> None:
    tb = tm.Traceback((("a.py", 3),))
    stat = tm.Statistic(tb, 2048, 2)
    assert (stat.traceback, stat.size, stat.count) == (tb, 2048, 2)
    assert stat == tm.Statistic(tm.Traceback((("a.py", 3),)), 2048, 2)
    assert hash(stat) == hash(tm.Statistic(tm.Traceback((("a.py", 3),)), 2048, 2))
    ref = stdlib_tm.Statistic(stdlib_tm.Traceback((("a.py", 3),)), 2048, 2)
    assert (str(stat), repr(stat)) == (str(ref), repr(ref))
    diff = tm.StatisticDiff(tb, 4096, -1024, 3, 1)
    ref_diff = stdlib_tm.StatisticDiff(stdlib_tm.Traceback((("a.py", 3),)), 4096, -1024, 3, 1)
    assert (diff.size, diff.size_diff, diff.count, diff.count_diff) == (4096, -1024, 3, 1)
    assert (str(diff), repr(diff)) == (str(ref_diff), repr(ref_diff))
    assert diff == tm.StatisticDiff(tm.Traceback((("a.py", 3),)), 4096, -1024, 3, 1)
