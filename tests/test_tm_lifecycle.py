"""start/stop/clear_traces/reset_peak and the traced-memory counters."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

from block_sizes import bytearray_buffer
from child_python import describe, run_scenario
from snapshot_views import frame_rows
from source_lines import site

MiB = 1024 * 1024
SLACK = 2048  # bytes the interpreter may allocate around a measured statement


def _here(tag: str) -> tuple[str, int]:
    return site(__file__, tag)


def test_fresh_interpreter_state(tm_name: str, tmp_path: Path) -> None:
    result = run_scenario(
        tmp_path,
        tm_name,
        """
        import json
        print(json.dumps([tm.is_tracing(), tm.get_traceback_limit(), tm.get_traced_memory(),
                          tm.get_object_traceback(object())]))
        """,
    )
    assert result.returncode == 0, describe(result)
    assert json.loads(result.stdout) == [False, 1, [0, 0], None]


def test_start_and_stop_toggle_tracing(tm: ModuleType) -> None:
    tm.stop()  # stopping while not tracing is a no-op
    assert not tm.is_tracing()
    tm.start()
    assert tm.is_tracing()
    assert tm.get_traceback_limit() == 1
    tm.stop()
    assert not tm.is_tracing()
    assert tm.get_traced_memory() == (0, 0)


def test_start_while_tracing_keeps_the_first_limit(tm: ModuleType) -> None:
    tm.start(3)
    tm.start(7)
    assert tm.is_tracing()
    assert tm.get_traceback_limit() == 3
    assert tm.take_snapshot().traceback_limit == 3


def test_limit_survives_stop(tm: ModuleType) -> None:
    tm.start(9)
    tm.stop()
    assert tm.get_traceback_limit() == 9
    tm.start(4)
    tm.stop()
    assert tm.get_traceback_limit() == 4


def test_stop_start_cycles_clear_traces(tm: ModuleType) -> None:
    previous: bytearray | None = None
    for cycle in range(50):
        limit = 1 + cycle % 5
        tm.start(limit)
        assert tm.get_traceback_limit() == limit
        if previous is not None:
            assert tm.get_object_traceback(previous) is None, f"cycle {cycle}: stale trace"
        obj = bytearray(10_000)  # @tm:cycle
        tb = tm.get_object_traceback(obj)
        assert tb is not None, f"cycle {cycle}"
        assert frame_rows(tb)[-1] == _here("cycle")
        assert len(tb) <= limit
        current, peak = tm.get_traced_memory()
        assert 10_000 <= current <= peak
        tm.stop()
        assert tm.get_traced_memory() == (0, 0)
        assert tm.get_object_traceback(obj) is None
        assert tm.get_traceback_limit() == limit
        previous = obj


def test_traced_memory_follows_allocation_and_free(tm: ModuleType) -> None:
    size = 5 * MiB
    tm.start(1)
    current0, _ = tm.get_traced_memory()
    obj = bytearray(size)
    current1, peak1 = tm.get_traced_memory()
    assert size <= current1 - current0 <= size + SLACK
    assert peak1 >= current1
    del obj
    current2, peak2 = tm.get_traced_memory()
    assert abs(current2 - current0) <= SLACK
    assert peak2 >= current1


def test_freeing_untraced_memory_changes_nothing(tm: ModuleType) -> None:
    size = 5 * MiB
    old = bytearray(size)  # allocated before start(): its free must be ignored
    tm.start(1)
    # A traced block first, so that the figure is far above zero: a free of the untraced
    # block subtracted (and clamped at zero) would show.
    held = bytearray(2 * MiB)
    current0, peak0 = tm.get_traced_memory()
    assert current0 >= 2 * MiB
    del old
    current1, peak1 = tm.get_traced_memory()
    assert abs(current1 - current0) <= SLACK
    assert peak1 >= peak0
    # And what is traced afterwards is counted from there, exactly.
    after = bytearray(MiB)
    current2, _ = tm.get_traced_memory()
    assert MiB <= current2 - current1 <= MiB + SLACK
    sizes = sorted(t.size for t in tm.take_snapshot().traces if t.size >= MiB)
    assert sizes == [bytearray_buffer(MiB), bytearray_buffer(2 * MiB)], sizes
    del held, after


def test_clear_traces_forgets_blocks_and_peak(tm: ModuleType) -> None:
    size = 5 * MiB
    tm.start(1)
    obj = bytearray(size)
    assert tm.get_object_traceback(obj) is not None
    tm.clear_traces()
    assert tm.is_tracing()
    assert tm.get_object_traceback(obj) is None
    current, peak = tm.get_traced_memory()
    assert current < size and peak < size
    after = bytearray(size)  # @tm:after-clear
    assert tm.get_object_traceback(after) is not None
    big = [t for t in tm.take_snapshot().traces if t.size >= size]
    assert [frame_rows(t.traceback) for t in big] == [(_here("after-clear"),)]


def test_reset_peak_lowers_the_peak_to_current(tm: ModuleType) -> None:
    size = 10 * MiB
    tm.start(1)
    big = bytearray(size)
    del big
    current, peak = tm.get_traced_memory()
    assert peak >= size > current
    tm.reset_peak()
    current2, peak2 = tm.get_traced_memory()
    assert current2 <= peak2 < size
    small = bytearray(MiB)
    current3, peak3 = tm.get_traced_memory()
    assert peak3 >= current3 >= current2 + MiB
    del small


def test_reset_peak_and_clear_traces_while_stopped(tm: ModuleType) -> None:
    tm.reset_peak()
    tm.clear_traces()
    assert tm.get_traced_memory() == (0, 0)
    assert not tm.is_tracing()


def test_tracemalloc_memory_grows_with_the_traces(tm: ModuleType) -> None:
    tm.start(1)
    empty = tm.get_tracemalloc_memory()
    held = [bytearray(100) for _ in range(20_000)]
    full = tm.get_tracemalloc_memory()
    assert isinstance(full, int)
    # At least a few words a trace (the stdlib: 116 bytes, memtape: 58, on 3.11).
    assert full - empty >= 20_000 * 16, (empty, full)
    del held


def test_snapshot_outlives_stop(tm: ModuleType) -> None:
    tm.start(1)
    obj = bytearray(MiB)  # @tm:outlives
    snapshot = tm.take_snapshot()
    tm.stop()
    top = snapshot.statistics("lineno")[0]
    assert frame_rows(top.traceback) == (_here("outlives"),)
    assert top.size >= MiB
    del obj
