"""take_snapshot leaves no more of itself in the traces than the standard library does.

The stdlib traces its own Python-level work in ``take_snapshot`` (the Snapshot it builds
is allocated in tracemalloc.py while tracing), so a snapshot taken while an earlier one is
alive shows tracemalloc.py among the sites. memtape may show its ``tracemalloc`` module
there too, never more bytes than the stdlib shows, and no other memtape file.
"""

from __future__ import annotations

import os
from types import ModuleType

import memtape


def tracer_footprint(tm: ModuleType) -> dict[str, int]:
    """Bytes each of the tracer's own files holds in a snapshot taken while an earlier
    snapshot is alive."""
    package = os.path.dirname(os.path.abspath(memtape.__file__)) + os.sep
    tm.start(1)
    try:
        first = tm.take_snapshot()
        second = tm.take_snapshot()
    finally:
        tm.stop()
    own = {}
    for stat in second.statistics("filename"):
        filename = stat.traceback[0].filename
        if filename == tm.__file__ or filename.startswith(package):
            own[filename] = stat.size
    del first
    return own


def test_take_snapshot_traces_no_more_of_itself_than_the_stdlib(
    stdlib_tm: ModuleType, memtape_tm: ModuleType
) -> None:
    stdlib = tracer_footprint(stdlib_tm)
    ours = tracer_footprint(memtape_tm)
    assert set(stdlib) == {stdlib_tm.__file__}, "the stdlib traces its own Snapshot"
    assert set(ours) <= {memtape_tm.__file__}, f"memtape files besides its tracemalloc: {ours}"
    assert sum(ours.values()) <= sum(stdlib.values()), (ours, stdlib)
