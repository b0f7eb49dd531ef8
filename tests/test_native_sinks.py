"""Native blocks in the event recorder (``sources=("native",)``, device -2, in
``dump_snapshot``) and, when asked for with ``MEMTAPE_TRACEMALLOC_NATIVE=1``, in a
tracemalloc domain of their own that ``DomainFilter`` selects."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from memtape import _native
from memtape_cli import ok, python, write_program
from native_lib import LOAD_LIBRARY, NativeLibs, build
from source_lines import line_of


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> NativeLibs:
    return build(tmp_path_factory.mktemp("native-sinks"))


EVENTS = """
import memtape
memtape.record_memory_events(sources=SOURCES)
keep = lib.na_malloc(12345)  # @tm:alloc
lib.na_free(lib.na_malloc(23456))  # @tm:freed
memtape.record_memory_events(False)
memtape.dump_snapshot(sys.argv[2])
print(json.dumps([
    [e["action"], e["device"], e["size"], e["frames"][-1][2] if e["frames"] else 0]
    for e in memtape.get_memory_events() if e["device"] == -2
]))
"""


def run_events(tmp_path: Path, libs: NativeLibs, sources: str) -> tuple[Path, list[list[object]]]:
    script = write_program(
        tmp_path / "events.py",
        LOAD_LIBRARY + "import json\nSOURCES = " + sources + "\n" + EVENTS,
    )
    out = tmp_path / "snapshot.pickle"
    result = ok(python(script, str(libs.alloc), str(out)))
    return script, json.loads(result.stdout.strip().splitlines()[-1])


def test_native_events_on_the_calling_line(tmp_path: Path, libs: NativeLibs) -> None:
    script, events = run_events(tmp_path, libs, '("python", "native")')
    alloc_line, freed_line = line_of(script, "alloc"), line_of(script, "freed")
    assert ["alloc", -2, 12345, alloc_line] in events
    assert ["alloc", -2, 23456, freed_line] in events
    assert ["free", -2, 23456, 0] in events
    with open(tmp_path / "snapshot.pickle", "rb") as f:
        snapshot = pickle.load(f)
    sizes = {
        (entry["action"], entry["size"]) for trace in snapshot["device_traces"] for entry in trace
    }
    assert ("alloc", 12345) in sizes and ("free_completed", 23456) in sizes


def test_native_events_only_when_asked(tmp_path: Path, libs: NativeLibs) -> None:
    _, events = run_events(tmp_path, libs, '("python",)')
    assert events == []


TRACEMALLOC = """
import json
import memtape.tracemalloc as tracemalloc
tracemalloc.start()
keep = lib.na_malloc(54321)  # @tm:alloc
snapshot = tracemalloc.take_snapshot()
native = snapshot.filter_traces([tracemalloc.DomainFilter(True, DOMAIN)])
print(json.dumps([[t.size, t.traceback[0].lineno] for t in native.traces]))
"""


@pytest.mark.parametrize("opt_in", [True, False])
def test_tracemalloc_native_domain_on_request(
    tmp_path: Path, libs: NativeLibs, opt_in: bool
) -> None:
    script = write_program(
        tmp_path / "tm.py",
        LOAD_LIBRARY + f"DOMAIN = {_native.NATIVE_DOMAIN}\n" + TRACEMALLOC,
    )
    env = {"MEMTAPE_TRACEMALLOC_NATIVE": "1" if opt_in else "0"}
    result = ok(python(script, str(libs.alloc), env=env))
    traces = json.loads(result.stdout.strip().splitlines()[-1])
    if opt_in:
        assert [54321, line_of(script, "alloc")] in traces
    else:
        assert traces == []
