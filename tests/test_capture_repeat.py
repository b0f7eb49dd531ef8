"""capture_traceback() called from C again and again on the same stack: the repeated
stack's quick path (no walk, no recorder lock) must give what the full walk gives."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import memtape
import pytest
from c_abi.build import build_fakecache, load

OK, ESTALE = 0, -3  # include/memtape.h


@pytest.fixture(scope="module")
def fakecache(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    return load(build_fakecache(tmp_path_factory.mktemp("cabi_repeat")))


@pytest.fixture
def recording() -> Iterator[None]:
    memtape.record_memory_events(True, 1000, sources=("framework",))
    yield
    memtape.record_memory_events(False)


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
