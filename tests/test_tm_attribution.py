"""Which line owns the memory: statistics by lineno, filename and traceback."""

from __future__ import annotations

from types import ModuleType

from snapshot_views import find_stat, frame_rows
from source_lines import site

MiB = 1024 * 1024
BIG = 50 * MiB
TOLERANCE = BIG // 100  # 1 %


def _here(tag: str) -> tuple[str, int]:
    return site(__file__, tag)


def _inner() -> bytearray:
    return bytearray(BIG)  # @tm:chain-inner


def _middle() -> bytearray:
    return _inner()  # @tm:chain-middle


def _outer() -> bytearray:
    return _middle()  # @tm:chain-outer


def test_big_allocation_is_the_top_lineno_statistic(tm: ModuleType) -> None:
    tm.start(1)
    blob = bytearray(BIG)  # @tm:big-lineno
    snapshot = tm.take_snapshot()
    top = snapshot.statistics("lineno")[0]
    assert BIG <= top.size <= BIG + TOLERANCE
    assert top.count >= 1
    assert frame_rows(top.traceback) == (_here("big-lineno"),)
    frame = top.traceback[0]
    assert (frame.filename, frame.lineno) == _here("big-lineno")
    del blob


def test_big_allocation_counts_in_its_file(tm: ModuleType) -> None:
    tm.start(1)
    blob = bytearray(BIG)  # noqa: F841
    top = tm.take_snapshot().statistics("filename")[0]
    assert frame_rows(top.traceback) == ((__file__, 0),)
    assert BIG <= top.size <= BIG + TOLERANCE


def test_traceback_statistic_shows_the_call_chain(tm: ModuleType) -> None:
    tm.start(25)
    blob = _outer()  # @tm:chain-test
    top = tm.take_snapshot().statistics("traceback")[0]
    assert BIG <= top.size <= BIG + TOLERANCE
    assert frame_rows(top.traceback)[-4:] == (
        _here("chain-test"),
        _here("chain-outer"),
        _here("chain-middle"),
        _here("chain-inner"),
    )
    del blob


def test_lineno_statistics_attribute_only_the_allocating_line(tm: ModuleType) -> None:
    tm.start(25)
    blob = _outer()  # noqa: F841
    stats = tm.take_snapshot().statistics("lineno")
    assert frame_rows(stats[0].traceback) == (_here("chain-inner"),)
    callers = {_here("chain-outer"), _here("chain-middle")}
    assert all(s.size < BIG for s in stats if frame_rows(s.traceback)[0] in callers)


def test_cumulative_lineno_counts_every_frame_of_the_chain(tm: ModuleType) -> None:
    tm.start(25)
    blob = _outer()  # @tm:cumulative-test
    stats = tm.take_snapshot().statistics("lineno", cumulative=True)
    for tag in ("cumulative-test", "chain-outer", "chain-middle", "chain-inner"):
        stat = find_stat(stats, (_here(tag),))
        assert BIG <= stat.size <= BIG + TOLERANCE, tag
    del blob


def test_cumulative_filename_counts_each_frame_in_the_file(tm: ModuleType) -> None:
    # The trace has four frames in this file (test, outer, middle, inner); cumulative
    # statistics count the trace once per frame, as the stdlib does.
    tm.start(25)
    blob = _outer()
    stats = tm.take_snapshot().statistics("filename", cumulative=True)
    stat = find_stat(stats, ((__file__, 0),))
    assert 4 * BIG <= stat.size <= 4 * (BIG + TOLERANCE)
    del blob


def test_compare_to_reports_the_new_allocation(tm: ModuleType) -> None:
    tm.start(1)
    before = tm.take_snapshot()
    blob = bytearray(BIG)  # @tm:compare-new
    after = tm.take_snapshot()
    top = after.compare_to(before, "lineno")[0]
    assert frame_rows(top.traceback) == (_here("compare-new"),)
    assert BIG <= top.size_diff <= BIG + TOLERANCE
    assert top.size == top.size_diff  # absent from the old snapshot
    assert top.count_diff == top.count >= 1
    del blob
    freed = tm.take_snapshot().compare_to(after, "lineno")[0]
    assert frame_rows(freed.traceback) == (_here("compare-new"),)
    assert freed.size == 0 and freed.count == 0
    assert -BIG - TOLERANCE <= freed.size_diff <= -BIG


def test_filters_select_traces_by_file_line_and_frames(tm: ModuleType) -> None:
    tm.start(25)
    blob = _outer()  # noqa: F841
    snapshot = tm.take_snapshot()
    inner_file, inner_line = _here("chain-inner")

    def total(filters: list[object]) -> int:
        return sum(t.size for t in snapshot.filter_traces(filters).traces)

    assert BIG <= total([tm.Filter(True, inner_file, inner_line)]) <= BIG + TOLERANCE
    assert total([tm.Filter(False, inner_file)]) < BIG
    assert total([tm.Filter(True, inner_file, _here("chain-outer")[1])]) < BIG
    assert total([tm.Filter(True, inner_file, _here("chain-outer")[1], all_frames=True)]) >= BIG
    assert total([tm.DomainFilter(True, 0)]) >= BIG
    assert total([tm.DomainFilter(False, 0)]) == 0
    kept = snapshot.filter_traces([tm.Filter(True, inner_file, inner_line)])
    assert kept.traceback_limit == snapshot.traceback_limit == 25
    assert all(t.traceback[-1].lineno == inner_line for t in kept.traces)
