"""Snapshot.dump/load files interchange with the stdlib, both ways."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO

from child_python import describe, run_python
from snapshot_views import frame_rows, stat_rows, trace_rows

# Raw traces as _tracemalloc returns them: (domain, size, frames most recent first,
# total_nframe).
RAW_TRACES = [
    (0, 10, (("a.py", 2), ("b.py", 4)), 3),
    (0, 10, (("a.py", 2), ("b.py", 4)), 3),
    (0, 10, (("a.py", 5), ("b.py", 4)), 2),
    (1, 2, (("a.py", 5),), 1),
    (2, 66, (("b.py", 1),), 1),
    (3, 7, (("<unknown>", 0),), 1),
]

# Loads a snapshot file with a vanilla interpreter (-I -S: no site-packages, so no
# memtape and no .pth shims) and prints what it holds.
VANILLA_LOAD = """
import json, sys, tracemalloc
snapshot = tracemalloc.Snapshot.load(sys.argv[1])
assert type(snapshot) is tracemalloc.Snapshot, type(snapshot)
rows = [[t.domain, t.size, [[f.filename, f.lineno] for f in t.traceback],
         t.traceback.total_nframe] for t in snapshot.traces]
print(json.dumps({"rows": rows, "limit": snapshot.traceback_limit,
                  "note": getattr(snapshot, "note", None)}))
"""

# Takes a real snapshot with the vanilla stdlib tracer and dumps it.
VANILLA_DUMP = """
import json, sys, tracemalloc
def chain():
    return [bytearray(1000 + i) for i in range(50)]
tracemalloc.start(4)
keep = chain()
snapshot = tracemalloc.take_snapshot()
tracemalloc.stop()
snapshot.note = "from the stdlib"
snapshot.dump(sys.argv[1])
stats = [[[[f.filename, f.lineno] for f in s.traceback], s.size, s.count]
         for s in snapshot.statistics("traceback")]
print(json.dumps({"stats": stats, "count": len(snapshot.traces)}))
"""


def _chain() -> list[bytearray]:
    return [bytearray(1000 + i) for i in range(50)]


def _jsonable(rows: list[tuple[int, int, tuple[tuple[str, int], ...], int]]) -> list[object]:
    plain: list[object] = json.loads(json.dumps(rows))
    return plain


class _RecordingUnpickler(pickle.Unpickler):
    """Records every global a pickle refers to."""

    def __init__(self, file: BinaryIO) -> None:
        super().__init__(file)
        self.globals: set[str] = set()

    def find_class(self, module: str, name: str) -> Any:
        self.globals.add(f"{module}.{name}")
        return super().find_class(module, name)


def _pickled_globals(path: Path) -> set[str]:
    with open(path, "rb") as fp:
        unpickler = _RecordingUnpickler(fp)
        unpickler.load()
    return unpickler.globals


def test_dump_loads_with_the_reference(
    tm: ModuleType, stdlib_tm: ModuleType, tmp_path: Path
) -> None:
    tm.start(5)
    keep = _chain()
    snapshot = tm.take_snapshot()
    tm.stop()
    snapshot.note = "extra attribute"
    path = tmp_path / "snapshot.pickle"
    snapshot.dump(str(path))
    loaded = stdlib_tm.Snapshot.load(str(path))
    assert type(loaded) is stdlib_tm.Snapshot
    assert trace_rows(loaded) == trace_rows(snapshot)
    assert len(loaded.traces) == len(snapshot.traces) > 0
    assert loaded.traceback_limit == 5
    assert loaded.note == "extra attribute"
    for key in ("lineno", "filename", "traceback"):
        assert stat_rows(loaded.statistics(key)) == stat_rows(snapshot.statistics(key)), key
    del keep


def test_dump_names_only_tracemalloc_classes(tm: ModuleType, tmp_path: Path) -> None:
    tm.start(3)
    snapshot = tm.take_snapshot()
    tm.stop()
    path = tmp_path / "snapshot.pickle"
    snapshot.dump(str(path))
    assert _pickled_globals(path) == {"tracemalloc.Snapshot", "tracemalloc._Traces"}
    with open(path, "rb") as fp:
        assert fp.read(2) == bytes([0x80, pickle.HIGHEST_PROTOCOL])


def test_dump_loads_in_a_vanilla_interpreter(tm: ModuleType, tmp_path: Path) -> None:
    tm.start(4)
    keep = _chain()
    snapshot = tm.take_snapshot()
    tm.stop()
    snapshot.note = "for a machine without memtape"
    path = tmp_path / "snapshot.pickle"
    snapshot.dump(str(path))
    result = run_python(["-I", "-S", "-c", VANILLA_LOAD, str(path)])
    assert result.returncode == 0, describe(result)
    loaded = json.loads(result.stdout)
    assert loaded["rows"] == _jsonable(trace_rows(snapshot))
    assert loaded["limit"] == 4
    assert loaded["note"] == "for a machine without memtape"
    del keep


def test_load_reads_a_reference_dump_of_synthetic_traces(
    tm: ModuleType, stdlib_tm: ModuleType, tmp_path: Path
) -> None:
    reference = stdlib_tm.Snapshot(RAW_TRACES, 4)
    reference.note = {"extra": [1, 2]}
    path = tmp_path / "reference.pickle"
    reference.dump(str(path))
    loaded = tm.Snapshot.load(str(path))
    assert trace_rows(loaded) == trace_rows(reference)
    assert loaded.traceback_limit == 4
    assert loaded.note == {"extra": [1, 2]}
    for key in ("lineno", "filename", "traceback"):
        assert stat_rows(loaded.statistics(key)) == stat_rows(reference.statistics(key)), key
    for key in ("lineno", "filename"):
        assert stat_rows(loaded.statistics(key, cumulative=True)) == stat_rows(
            reference.statistics(key, cumulative=True)
        ), key


def test_load_reads_a_real_reference_dump(tm: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "vanilla.pickle"
    result = run_python(["-I", "-S", "-c", VANILLA_DUMP, str(path)])
    assert result.returncode == 0, describe(result)
    expected = json.loads(result.stdout)
    loaded = tm.Snapshot.load(str(path))
    assert len(loaded.traces) == expected["count"] > 0
    assert loaded.traceback_limit == 4
    assert loaded.note == "from the stdlib"
    stats = [
        [[list(frame) for frame in frame_rows(s.traceback)], s.size, s.count]
        for s in loaded.statistics("traceback")
    ]
    assert stats == expected["stats"]


def test_dump_load_round_trip(tm: ModuleType, tmp_path: Path) -> None:
    tm.start(6)
    keep = _chain()
    snapshot = tm.take_snapshot()
    tm.stop()
    snapshot.note = "round trip"
    path = tmp_path / "snapshot.pickle"
    snapshot.dump(str(path))
    loaded = tm.Snapshot.load(str(path))
    assert trace_rows(loaded) == trace_rows(snapshot)
    assert loaded.traceback_limit == 6
    assert loaded.note == "round trip"
    diffs = loaded.compare_to(snapshot, "lineno")
    assert len(diffs) == len(snapshot.statistics("lineno")) > 0
    assert all(d.size_diff == 0 and d.count_diff == 0 for d in diffs)
    del keep
