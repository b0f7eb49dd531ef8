"""The C ABI (include/memtape.h) driven by a real C extension: a small caching allocator."""

from __future__ import annotations

import subprocess
import sys
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


def test_capture_from_c_does_not_read_the_stack_while_not_recording(
    fakecache: ModuleType,
) -> None:
    reads = memtape._native._traceback_stack_reads
    before = reads()
    assert [fakecache.capture() for _ in range(100)] == [0] * 100
    assert fakecache.time_capture(10_000)[1] == 0  # the sum of the ids: all 0
    assert reads() == before
    memtape.record_memory_events(True, 1000, sources=("framework",))
    try:
        assert fakecache.capture() != 0
    finally:
        memtape.record_memory_events(False)
    assert reads() == before + 1
    assert fakecache.capture() == 0
    assert reads() == before + 1


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


# capture_traceback() from C again and again on the same stack: the repeated stack's quick
# path (no walk, no recorder lock) must give what the full walk gives.


def test_a_repeated_stack_gets_the_id_of_its_walk(fakecache: ModuleType, recording: None) -> None:
    def capture_here() -> int:
        return int(fakecache.capture())

    ids = [capture_here() for _ in range(5)]
    assert ids[0] != 0
    assert ids == [ids[0]] * 5


def test_a_repeated_stack_follows_the_recording(fakecache: ModuleType) -> None:
    def capture_here() -> int:
        return int(fakecache.capture())

    ids = []
    # The same call site each time: the stack repeats, only the recording changes.
    for on in (True, True, False, False, True):
        if on:
            memtape.record_memory_events(True, 1000, sources=("framework",))
        else:
            memtape.record_memory_events(False)
        ids.append(capture_here())
    memtape.record_memory_events(False)
    first, restarted, stopped, still_stopped, last = ids
    assert first != 0 and restarted != 0 and last != 0
    assert (stopped, still_stopped) == (0, 0)
    assert len({first, restarted, last}) == 3  # a new recording, new ids
    memtape.record_memory_events(True, 1000, sources=("framework",))
    try:
        assert fakecache.raw_enter("op", last)[0] == ESTALE
        again = capture_here()
        assert fakecache.raw_enter("op", again) == (OK, "")
        assert fakecache.raw_exit() == (OK, "")
    finally:
        memtape.record_memory_events(False)


# Runs in a child whose outermost frame is the script's own: every frame of the stack but
# that one is a `nested` frame, so a change can sit at any place in the chain of callers
# that the repeated stack's check compares (the chain's length varies with the depth).
CHANGED_CALLER = """
import sys
import memtape
sys.path.insert(0, sys.argv[1])
from c_abi.build import load
module = load(sys.argv[2])

def nested(n, k):
    # `n` frames of this function, the one at depth `k` calling from another line:
    # stacks that differ in one caller only, with every frame at the same address.
    if n == 0:
        return module.capture()
    if n == k:
        return nested(n - 1, k)
    return nested(n - 1, k)

memtape.record_memory_events(True, 1000, sources=("framework",))
for depth in (29, 30, 31, 32):
    # Back to the plain stack between changes: each step changes one caller only.
    order = [0]
    for k in range(1, depth + 1):
        order += [k, 0]
    got = []
    for k in order:
        for _ in range(2):
            got.append(nested(depth, k))  # one call site: this frame never changes
    ids = {}
    for i, k in enumerate(order):
        walked, repeated = got[2 * i], got[2 * i + 1]
        assert walked != 0
        assert repeated == walked, (depth, k, "the repeated stack got another id")
        assert ids.setdefault(k, walked) == walked, (depth, k, "the change was missed")
    assert len(set(ids.values())) == depth + 1, (depth, "a changed caller was missed")
print("ok")
"""


def test_a_changed_caller_at_any_depth_is_seen(tmp_path: Path) -> None:
    lib = build_fakecache(tmp_path)
    tests = str(Path(__file__).resolve().parent)
    child = subprocess.run(
        [sys.executable, "-c", CHANGED_CALLER, tests, str(lib)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "ok"
