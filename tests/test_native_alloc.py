"""Native allocations (GOT hooks): a gcc-built C library loaded with ctypes after tracing
started (ctypes releases the GIL around each call). Exact bytes and counts per allocator
call, each on the calling Python line; mmap ranges; threads without Python; frees of
older blocks; slots restored at stop; the `_decimal` allocator; fork; start/stop racing
with native allocation in 8 threads; NumPy arrays counted once."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from memtape import _native
from memtape_cli import memtape, ok, python, read_json, record, write_program
from native_lib import LOAD_LIBRARY, NativeLibs, build, domain_sizes, native_blocks
from source_lines import site

PAGE = 4096


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> NativeLibs:
    return build(tmp_path_factory.mktemp("native-libs"))


def test_each_allocator_call_on_its_line(tmp_path: Path, libs: NativeLibs) -> None:
    script = write_program(
        tmp_path / "calls.py",
        LOAD_LIBRARY
        + """
keep = []
keep.append(lib.na_malloc(1000))  # @tm:malloc
keep.append(lib.na_calloc(10, 30))  # @tm:calloc
p = lib.na_malloc(100)  # @tm:chain0
p = lib.na_realloc(p, 5000)  # @tm:chain1
p = lib.na_realloc(p, 7000)  # @tm:chain2
keep.append(p)
keep.append(lib.na_reallocarray(None, 12, 100))  # @tm:reallocarray
keep.append(lib.na_posix_memalign(64, 4000))  # @tm:posix_memalign
keep.append(lib.na_aligned_alloc(256, 2048))  # @tm:aligned_alloc
keep.append(lib.na_memalign(128, 3000))  # @tm:memalign
keep.append(lib.na_valloc(1234))  # @tm:valloc
lib.na_free(lib.na_malloc(555))  # @tm:freed
m = lib.na_mmap(4 * 4096)  # @tm:mmap
lib.na_munmap(m + 4096, 4096)  # @tm:munmap
r = lib.na_mmap(2 * 4096)  # @tm:mremap_from
r = lib.na_mremap(r, 2 * 4096, 5 * 4096)  # @tm:mremap
gone = lib.na_mmap(3 * 4096)  # @tm:unmapped
lib.na_munmap(gone, 3 * 4096)
""",
    )
    capture = tmp_path / "calls.mtape"
    record(script, capture, str(libs.alloc))
    blocks = native_blocks(capture)
    path = str(script)

    def at(tag: str) -> Counter[int]:
        return Counter({size: n for (size, frame), n in blocks.items() if frame == site(path, tag)})

    assert at("malloc") == Counter({1000: 1})
    assert at("calloc") == Counter({300: 1})
    assert at("chain0") == Counter() and at("chain1") == Counter()
    assert at("chain2") == Counter({7000: 1})
    assert at("reallocarray") == Counter({1200: 1})
    assert at("posix_memalign") == Counter({4000: 1})
    assert at("aligned_alloc") == Counter({2048: 1})
    assert at("memalign") == Counter({3000: 1})
    assert at("valloc") == Counter({1234: 1})
    assert at("freed") == Counter()
    # The partial munmap leaves the first page and the last two, still on the mmap line.
    assert at("mmap") == Counter({PAGE: 1, 2 * PAGE: 1})
    assert at("munmap") == Counter()
    # mremap moves the mapping and keeps the line that mapped it.
    assert at("mremap_from") == Counter({5 * PAGE: 1})
    assert at("unmapped") == Counter()


def test_runpath_of_the_caller_still_works(tmp_path: Path, libs: NativeLibs) -> None:
    # libnaparent.so opens libnachild.so by its bare name, found only via its RUNPATH.
    script = write_program(
        tmp_path / "runpath.py",
        """
import ctypes, sys
parent = ctypes.CDLL(sys.argv[1])
parent.parent_open.restype = ctypes.c_void_p
parent.parent_open.argtypes = [ctypes.c_char_p]
handle = parent.parent_open(b"libnachild.so")
assert handle, "the caller's RUNPATH was lost"
child = ctypes.CDLL("libnachild.so", handle=handle)
child.na_malloc.restype = ctypes.c_void_p
child.na_malloc.argtypes = [ctypes.c_size_t]
keep = child.na_malloc(4321)  # @tm:child
""",
    )
    capture = tmp_path / "runpath.mtape"
    record(script, capture, str(libs.parent))
    blocks = native_blocks(capture)
    assert blocks[(4321, site(str(script), "child"))] == 1


def test_thread_without_python_has_an_empty_stack(tmp_path: Path, libs: NativeLibs) -> None:
    script = write_program(
        tmp_path / "pthread.py",
        LOAD_LIBRARY
        + """
assert lib.na_pthread_alloc(777, 10) == 0
""",
    )
    capture = tmp_path / "pthread.mtape"
    record(script, capture, str(libs.alloc))
    blocks = native_blocks(capture)
    assert blocks[(777, ("<unknown>", 0))] == 10


API_RUN = """
import json
from memtape import _native
def start(path):
    _native._start_capture(path, "{}", 0, True)
def counters():
    slots, unknown, live, peak = _native.native_counters()
    return {"slots": slots, "unknown": unknown, "live": live, "peak": peak}
"""


def test_older_frees_are_counted_and_slots_restored(tmp_path: Path, libs: NativeLibs) -> None:
    script = write_program(
        tmp_path / "older.py",
        LOAD_LIBRARY
        + API_RUN
        + """
older = [lib.na_malloc(5000) for _ in range(20)]
before = lib.na_malloc_target()
assert before == libc_malloc, (before, libc_malloc)
start(sys.argv[2])
during = lib.na_malloc_target()
for p in older:
    lib.na_free(p)
kept = lib.na_malloc(3000)  # @tm:kept
seen = counters()
_native._stop_capture()
after = lib.na_malloc_target()
left = _native.native_counters()[0]
print(json.dumps({"hooked": during != libc_malloc, "restored": after == libc_malloc,
                  "left": left, **seen}))
""",
    )
    capture = tmp_path / "older.mtape"
    result = ok(python(script, str(libs.alloc), str(capture)))
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["hooked"] and report["restored"]
    assert report["left"] == 0  # every patched slot was put back
    assert report["slots"] > 0
    assert report["unknown"] >= 20
    # Only the block allocated while tracing is live: nothing negative, nothing lost.
    assert report["live"] >= 3000
    assert native_blocks(capture)[(3000, site(str(script), "kept"))] == 1
    # The capture's trailer counts them, and stats says so.
    stats = read_json("stats", capture)
    assert stats["run"]["native_unknown_frees"] >= 20
    assert "of memory allocated before tracing started" in ok(memtape("stats", capture)).stdout


@pytest.mark.parametrize("allocator", ["pymalloc", "malloc", "pymalloc_debug", "malloc_debug"])
def test_python_heap_churn_is_never_a_native_free(tmp_path: Path, allocator: str) -> None:
    # Under pymalloc the Python hooks' frees are not marked for the native hooks: a block
    # too large for pymalloc reaches libc through the RAW hook, an empty arena through the
    # wrapped arena allocator. Under any other allocator they are marked. Either way no
    # Python free may reach the native hooks as a free they never saw allocated, and no
    # arena may become a native mapping.
    script = write_program(
        tmp_path / "churn.py",
        API_RUN
        + """
import sys
start(sys.argv[1])
before = counters()
for round in range(20):
    small = [[i] for i in range(100_000)]          # new arenas, all released below
    large = [bytearray(4000) for _ in range(300)]  # past pymalloc's pools: PyMem_RawMalloc
    text = [str(i) * 50 for i in range(2000)]
    del small, large, text
after = counters()
_native._stop_capture()
print(json.dumps({"before": before, "after": after}))
""",
    )
    env = {"PYTHONMALLOC": allocator}
    result = ok(python(script, str(tmp_path / "churn.mtape"), env=env))
    report = json.loads(result.stdout.strip().splitlines()[-1])
    before, after = report["before"], report["after"]
    assert after["unknown"] - before["unknown"] < 20, report
    # 20 rounds of 100,000 lists would leave megabytes of arenas as native mappings.
    assert after["live"] - before["live"] < 1 << 20, report


def test_decimal_allocator_pointer_is_left_alone(tmp_path: Path) -> None:
    # _decimal points libmpdec's allocator at PyMem_Malloc at run time (a data
    # relocation): overwriting it makes frees of older Decimals abort (memray 1.20).
    script = write_program(
        tmp_path / "decimal_case.py",
        API_RUN
        + """
import sys, decimal
decimal.getcontext().prec = 100000
big = decimal.Decimal(7) ** 50000
start(sys.argv[1])
during = decimal.Decimal(3) ** 40000
del big
del during
_native._stop_capture()
late = decimal.Decimal(11) ** 30000
del late
print("ok")
""",
    )
    result = ok(python(script, str(tmp_path / "decimal.mtape")))
    assert result.stdout.strip().endswith("ok")


def test_fork_child_runs_and_traces_again(tmp_path: Path, libs: NativeLibs) -> None:
    script = write_program(
        tmp_path / "forking.py",
        LOAD_LIBRARY
        + API_RUN
        + """
import os
start(sys.argv[2])
keep = lib.na_malloc(1111)
pid = os.fork()
if pid == 0:
    lib.na_free(lib.na_malloc(64))
    start(sys.argv[3])
    child_keep = lib.na_malloc(2222)  # @tm:child
    _native._stop_capture()
    os._exit(0)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
_native._stop_capture()
print("ok")
""",
    )
    parent, child = tmp_path / "parent.mtape", tmp_path / "child.mtape"
    ok(python(script, str(libs.alloc), str(parent), str(child)))
    assert native_blocks(child)[(2222, site(str(script), "child"))] == 1
    assert Counter(s for s, _ in native_blocks(parent).elements())[2222] == 0


def test_start_stop_race_with_eight_allocating_threads(tmp_path: Path, libs: NativeLibs) -> None:
    script = write_program(
        tmp_path / "race.py",
        LOAD_LIBRARY
        + API_RUN
        + """
import threading
stop = threading.Event()
def churn():
    while not stop.is_set():
        lib.na_churn(2000, 48)
threads = [threading.Thread(target=churn) for _ in range(8)]
for t in threads:
    t.start()
for i in range(15):
    start(sys.argv[2] + f".{i}")
    lib.na_churn(100, 32)
    _native._stop_capture()
stop.set()
for t in threads:
    t.join()
assert lib.na_malloc_target() == libc_malloc
print("ok")
""",
    )
    result = ok(python(script, str(libs.alloc), str(tmp_path / "race.mtape"), timeout=120))
    assert result.stdout.strip().endswith("ok")


def test_numpy_array_counted_once(tmp_path: Path) -> None:
    script = write_program(
        tmp_path / "arrays.py",
        """
import numpy as np
a = np.ones(1_000_000)  # @tm:array
""",
    )
    capture = tmp_path / "arrays.mtape"
    record(script, capture)
    assert domain_sizes(capture, _native.NUMPY_DOMAIN)[8_000_000] == 1
    native = native_blocks(capture)
    assert all(size < 8_000_000 for size, _ in native), native


def test_no_native_heap_flag(tmp_path: Path, libs: NativeLibs) -> None:
    script = write_program(
        tmp_path / "off.py",
        LOAD_LIBRARY
        + """
keep = lib.na_malloc(4000)
""",
    )
    capture = tmp_path / "off.mtape"
    record(script, capture, str(libs.alloc), options=("--no-native-heap",))
    assert not native_blocks(capture)


def test_stop_after_a_patched_library_was_unloaded(tmp_path: Path, libs: NativeLibs) -> None:
    # The slots of an object unloaded while tracing are gone: stop must not write there.
    script = write_program(
        tmp_path / "unload.py",
        API_RUN
        + """
import ctypes, os, sys, _ctypes
start(sys.argv[2])
handle = _ctypes.dlopen(sys.argv[1], os.RTLD_NOW | os.RTLD_LOCAL)
child = ctypes.CDLL(sys.argv[1], handle=handle)
child.na_malloc.restype = ctypes.c_void_p
child.na_malloc.argtypes = [ctypes.c_size_t]
child.na_free.argtypes = [ctypes.c_void_p]
child.na_free(child.na_malloc(100))
del child
_ctypes.dlclose(handle)
_native._stop_capture()
print("ok")
""",
    )
    child_lib = libs.parent.parent / "sub" / "libnachild.so"
    result = ok(python(script, str(child_lib), str(tmp_path / "unload.mtape")))
    assert result.stdout.strip().endswith("ok")
