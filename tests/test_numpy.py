"""NumPy array buffers (allocated outside PyMem, through NEP 49 handlers) are traced."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tracemalloc as stdlib_tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import memtape
import memtape.tracemalloc as mt_tracemalloc
import numpy as np
import pytest
from memtape_cli import read_json, record, write_program
from source_lines import line_of
from torch_viz.memory_viz import check_snapshot

HERE = Path(__file__)
NUMPY_DOMAIN = 389047
MiB = 1024 * 1024


@pytest.fixture(autouse=True)
def stopped() -> Iterator[None]:
    yield
    mt_tracemalloc.stop()
    memtape.record_memory_events(False)


def numpy_traces(tm: Any) -> list[tuple[int, int, int]]:
    """(domain, size, line in this file) of NumPy buffers, as `tm` traced them."""
    snapshot = tm.take_snapshot().filter_traces([tm.DomainFilter(True, NUMPY_DOMAIN)])
    found = []
    for trace in snapshot.traces:
        lines = [f.lineno for f in trace.traceback if f.filename == str(HERE)]
        found.append((trace.domain, trace.size, lines[-1] if lines else 0))
    return found


@pytest.mark.parametrize("tm", [stdlib_tracemalloc, mt_tracemalloc], ids=["stdlib", "memtape"])
def test_array_buffer_is_a_trace_in_numpy_domain(tm: Any) -> None:
    tm.start(10)
    try:
        array = np.ones(250_000)  # @tm:np-ones
        traces = numpy_traces(tm)
    finally:
        tm.stop()
    assert (NUMPY_DOMAIN, array.nbytes, line_of(HERE, "np-ones")) in traces


def test_events_attribute_array_data_to_the_creating_line(tmp_path: Path) -> None:
    memtape.record_memory_events(True, 10_000, min_size=100_000)
    a = np.zeros(40_000)  # @tm:np-zeros
    b = a * 3  # @tm:np-mul
    del a
    memtape.record_memory_events(False)
    events = memtape.get_memory_events()
    allocs = [(e["size"], e["frames"][-1][2]) for e in events if e["action"] == "alloc"]
    assert (b.nbytes, line_of(HERE, "np-zeros")) in allocs
    assert (b.nbytes, line_of(HERE, "np-mul")) in allocs
    frees = [e for e in events if e["action"] == "free" and e["size"] == b.nbytes]
    assert frees and frees[0]["frames"][-1][2] == line_of(HERE, "np-mul") + 1
    out = tmp_path / "numpy.pickle"
    memtape.dump_snapshot(out)
    check_snapshot(out)


def test_numpy_imported_after_tracing_started(tmp_path: Path) -> None:
    script = tmp_path / "late.py"
    script.write_text(
        textwrap.dedent(
            """
            import memtape.tracemalloc as tm
            tm.start(3)
            import numpy as np
            data = np.empty(123_456, dtype=np.uint8)
            snap = tm.take_snapshot()
            sizes = [t.size for t in snap.traces if t.domain == 389047]
            print(123_456 in sizes)
            """
        )
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "True"


def resident_bytes() -> int:
    """This process' resident set, from ``/proc/self/statm``."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_arrays_outlive_stop_and_free_cleanly() -> None:
    mt_tracemalloc.start(1)
    arrays = [np.arange(10_000 + i) for i in range(20)]
    # 64 MiB each: above any malloc's mmap threshold (glibc's grows to 32 MiB at most),
    # so each free gives its pages back at once.
    arrays += [np.ones(8 * MiB) for _ in range(3)]
    mt_tracemalloc.stop()
    held = resident_bytes()
    # Freed through memtape's handler after tracing stopped: the memory goes back.
    del arrays
    assert held - resident_bytes() >= 3 * 60 * MiB
    mt_tracemalloc.start(1)
    again = np.arange(50_000)  # @tm:np-again
    # Those frees left nothing behind: the one buffer traced is this one, and it is
    # counted once.
    traced = numpy_traces(mt_tracemalloc)
    assert traced == [(NUMPY_DOMAIN, again.nbytes, line_of(HERE, "np-again"))], traced
    current, _ = mt_tracemalloc.get_traced_memory()
    assert again.nbytes <= current < again.nbytes + (1 << 16), current
    mt_tracemalloc.stop()


def test_a_buffer_is_one_block_with_no_python_heap_copy() -> None:
    # NumPy 2.5's default handler allocates with PyMem_RawMalloc: beneath memtape's
    # handler, that call must not be recorded again in the Python domain (it was, and
    # its free never matched: every buffer stayed as Python heap).
    mt_tracemalloc.start(5)
    before = mt_tracemalloc.get_traced_memory()[0]
    array = np.ones(2_500_000)  # @tm:np-big
    during = mt_tracemalloc.get_traced_memory()[0]
    python = sum(
        t.size
        for t in mt_tracemalloc.take_snapshot().traces
        if t.domain == 0 and any(f.lineno == line_of(HERE, "np-big") for f in t.traceback)
    )
    del array
    after = mt_tracemalloc.get_traced_memory()[0]
    assert during - before < 20_000_000 + (1 << 16)
    assert python < 1 << 16, python
    assert after - before < 1 << 16


CAPTURED = """
import numpy as np
kept = np.ones(3_000_000)
for _ in range(5):
    scratch = np.arange(3_000_000) * 2.0
    del scratch
"""


def test_a_capture_counts_each_buffer_once(tmp_path: Path) -> None:
    script = write_program(tmp_path / "arrays.py", CAPTURED)
    capture = tmp_path / "arrays.mtape"
    record(script, capture)
    stats = read_json("stats", capture)
    end = stats["end"]["by_source"]
    # The kept array's 24 MB are NumPy's, once; the Python heap holds no copy of any.
    assert 24_000_000 <= end["framework"] < 24_000_000 + (1 << 16), end
    assert end["python"] < 16 << 20, end
    assert stats["peak"]["bytes"] < 3 * 24_000_000 + (16 << 20), stats["peak"]
