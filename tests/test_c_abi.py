"""The C ABI (include/memtape.h) driven by a real C extension: a small caching allocator."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import memtape
import pytest
from c_abi.build import build_fakecache, load
from source_lines import line_of

# Codes from include/memtape.h.
OK, EINVAL, EREJECTED, ESTALE = 0, -1, -2, -3
FREE_ACTIVE_TO_OS = 6


@pytest.fixture(scope="session")
def fakecache(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    return load(build_fakecache(tmp_path_factory.mktemp("cabi")))


@pytest.fixture
def recording() -> Iterator[None]:
    memtape.record_memory_events(True, 100_000, sources=("framework",))
    yield
    memtape.record_memory_events(False)


def framework_events() -> list[dict[str, Any]]:
    return [e for e in memtape.get_memory_events() if e["device"] >= 0]


def test_capsule_table_matches_the_header(fakecache: ModuleType) -> None:
    # Importing the extension ran memtape_import(), which checks the ABI version and size.
    assert type(memtape._native._C_API).__name__ == "PyCapsule"
    assert fakecache.capture() == 0  # not recording: no traceback


def test_alloc_reuse_and_release_are_recorded(fakecache: ModuleType, recording: None) -> None:
    a = fakecache.alloc(1000)  # @tm:cabi-alloc
    fakecache.free(a, 1024)
    b = fakecache.alloc(900)
    fakecache.free(b, 1024)
    fakecache.empty_cache()
    assert fakecache.last_rc() == OK
    events = framework_events()
    assert [e["action"] for e in events] == [
        "AllocNew",
        "FreeActiveToCache",
        "AllocReuse",
        "FreeActiveToCache",
        "FreeCacheToOS",
    ]
    assert a == b
    new, _, reuse, _, release = events
    assert (new["size"], new["requested_size"], new["stream"]) == (1024, 1000, 7)
    assert (reuse["size"], reuse["requested_size"]) == (1024, 900)
    assert release["size"] == 1024
    # With the GIL held and no op context, the current Python stack is captured.
    assert new["frames"][-1][0] == __file__
    assert new["frames"][-1][2] == line_of(Path(__file__), "cabi-alloc")


def test_lazy_eval_without_the_gil_attributes_to_creation_lines(
    fakecache: ModuleType, recording: None
) -> None:
    tb_a = memtape.capture_traceback()  # @tm:cabi-create-a
    tb_b = memtape.capture_traceback()  # @tm:cabi-create-b
    addrs = fakecache.eval([("matmul", tb_a, 4096), ("add", tb_b, 8192)])  # @tm:cabi-eval
    assert fakecache.last_rc() == OK
    events = framework_events()
    assert [(e["action"], e["op"]) for e in events] == [("AllocNew", "matmul"), ("AllocNew", "add")]
    lines = [e["frames"][-1][2] for e in events]
    here = Path(__file__)
    assert lines == [line_of(here, "cabi-create-a"), line_of(here, "cabi-create-b")]
    assert line_of(here, "cabi-eval") not in lines
    for addr, size in zip(addrs, (4096, 8192), strict=True):
        fakecache.free(addr, size)


def test_native_threads_without_the_gil(fakecache: ModuleType, recording: None) -> None:
    fakecache.churn_in_threads(4, 2000)
    assert fakecache.last_rc() == OK
    events = framework_events()
    # Every report was accepted: 4 threads x 2000 rounds x (alloc + free).
    assert len(events) == 4 * 2000 * 2
    assert sum(e["action"].startswith("Alloc") for e in events) == 4 * 2000
    assert len({e["thread"] for e in events}) >= 2
    fakecache.empty_cache()


def test_error_codes_and_messages(fakecache: ModuleType, recording: None) -> None:
    rc, message = fakecache.raw_event(99, 0x1000, 10)
    assert rc == EINVAL and "unknown action 99" in message
    rc, message = fakecache.raw_event(FREE_ACTIVE_TO_OS, 0xDEAD0, 0)
    assert rc == EREJECTED and "unknown address 0xdead0" in message
    rc, message = fakecache.raw_enter(None, 0)
    assert rc == EINVAL and "NULL" in message
    rc, message = fakecache.raw_exit()
    assert rc == EINVAL and "no op context" in message
    stale = memtape.capture_traceback()
    memtape.record_memory_events(True, 1000, sources=("framework",))  # a new recording
    rc, message = fakecache.raw_enter("op", stale)
    assert rc == ESTALE and "stale traceback id" in message
    # Nothing recorded was lost or changed by the failures.
    assert framework_events() == []
    rc, message = fakecache.raw_event(2, 0x5000, 64)  # AllocNew
    assert (rc, message) == (OK, "")
    assert fakecache.raw_event(FREE_ACTIVE_TO_OS, 0x5000, 0)[0] == OK


def test_calls_from_many_python_threads_while_recording_toggles(fakecache: ModuleType) -> None:
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            fakecache.free(fakecache.alloc(300), 512)

    threads = [threading.Thread(target=churn) for _ in range(4)]
    for t in threads:
        t.start()
    for _ in range(50):
        memtape.record_memory_events(True, 500, sources=("framework",))
        memtape.record_memory_events(False)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert fakecache.last_rc() == OK
    assert len(memtape.get_memory_events()) <= 500
    fakecache.empty_cache()
