"""Signal handlers that allocate, while native memory is recorded.

A C library installs a SIGPROF handler (``tests/native/sigalloc.c``) that mallocs, frees,
maps and unmaps, fired by a profiling timer as often as the kernel's tick allows (a few
hundred times a second, until 300 signals were handled or 4 s passed); a Python SIGALRM
handler allocates Python objects every 0.5 ms; the main thread and a second thread
allocate natively (ctypes releases the GIL) and on the Python heap; the event recorder
is started and stopped over and over. Under ``memtape run`` (with and without native
stacks) and under the event recorder alone, nothing may hang or crash, and the blocks the
program still holds at the end are counted exactly. A watchdog dumps every thread's
Python stack (faulthandler) and native stack (gdb) if the program stops making progress.

The allocator slots stay patched while the handler fires (``memtape run``'s capture, or
memtape's tracemalloc tracing native blocks beside the event recorder): a handler whose
``malloc`` is recorded while it interrupted a libc allocator call that began before the
slots were patched can wait for that call's lock (README, "Native memory").
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from child_python import child_env
from memtape_cli import read_json, write_program
from native_lib import build_library, native_blocks
from source_lines import line_of
from stress_watchdog import native_stacks

#: faulthandler dumps the Python stacks and exits after this long in the program.
WATCHDOG_S = 45
HELD, HELD_SIZE = 16, 77_777

PROGRAM = f"""
import ctypes, faulthandler, json, signal, sys, threading, time
faulthandler.dump_traceback_later({WATCHDOG_S})
import memtape
import memtape.tracemalloc

lib = ctypes.CDLL(sys.argv[1])
if sys.argv[2:] == ["hold-slots"]:
    memtape.tracemalloc.start()
lib.sa_start.argtypes = [ctypes.c_long]
lib.sa_stop.restype = ctypes.c_long
lib.sa_handled.restype = ctypes.c_long
lib.sa_churn.argtypes = [ctypes.c_int, ctypes.c_size_t]
lib.sa_churn.restype = ctypes.c_long
lib.sa_malloc.argtypes = [ctypes.c_size_t]
lib.sa_malloc.restype = ctypes.c_void_p
lib.sa_free.argtypes = [ctypes.c_void_p]

alarms = [0]
junk = []

def on_alarm(signum, frame):
    junk.append([bytearray(64) for _ in range(8)])
    del junk[:-4]
    alarms[0] += 1

signal.signal(signal.SIGALRM, on_alarm)
stop = threading.Event()
warmed = threading.Event()

def worker():
    # Before the timer starts: a SIGPROF landing in one of sa_warm's own mallocs, on
    # its way to the arena's lock, would find the handler's cache still cold and wait
    # for that lock (with or without memtape).
    lib.sa_warm()
    warmed.set()
    kept = []
    while not stop.is_set():
        lib.sa_churn(200, 4096)
        kept.append(bytes(300))
        if len(kept) > 50:
            kept.clear()

thread = threading.Thread(target=worker)
lib.sa_warm()
thread.start()
assert warmed.wait(30)
# Whatever happens here, the worker and the timer stop: an error fails the run with its
# traceback instead of leaving the worker (not a daemon) to keep the process alive.
try:
    assert lib.sa_start(100) == 0
    signal.setitimer(signal.ITIMER_REAL, 0.0005, 0.0005)
    rounds, deadline = 0, time.monotonic() + 4
    while rounds < 30 or (lib.sa_handled() < 300 and time.monotonic() < deadline):
        rounds += 1
        memtape.record_memory_events(max_entries=1_000_000, sources=("python", "native"))
        lib.sa_churn(300, 2048)
        words = [str(i) * 3 for i in range(2000)]
        memtape.record_memory_events(False)
        lib.sa_churn(300, 2048)
    memtape.record_memory_events(max_entries=1_000_000, sources=("python", "native"))
    held = [lib.sa_malloc({HELD_SIZE}) for _ in range({HELD})]  # @tm:held
    lib.sa_free(lib.sa_malloc({HELD_SIZE}))
finally:
    signal.setitimer(signal.ITIMER_REAL, 0, 0)
    stop.set()
    thread.join()
handled = lib.sa_stop()
events = [e for e in memtape.get_memory_events() if e["device"] == -2]
memtape.record_memory_events(False)
live = {{}}
for e in events:
    if e["action"] == "alloc":
        live[e["address"]] = e["size"]
    elif e["action"] == "free":
        live.pop(e["address"], None)
traced = []
if memtape.tracemalloc.is_tracing():
    native = memtape.tracemalloc.DomainFilter(True, memtape._native.NATIVE_DOMAIN)
    traces = memtape.tracemalloc.take_snapshot().filter_traces([native]).traces
    traced = [[t.size, t.traceback[0].lineno] for t in traces if t.size == {HELD_SIZE}]
print(json.dumps({{
    "handled": handled,
    "alarms": alarms[0],
    "held_live": sorted(live[a] for a in held if a in live),
    "held_traced": traced,
}}))
"""


@pytest.fixture(scope="module")
def sigalloc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_library("sigalloc", tmp_path_factory.mktemp("sigalloc"))


def run_watched(argv: list[str]) -> Result:
    """Runs ``python ARGV``; on a hang, fails with every thread's native stack."""
    proc = subprocess.Popen(
        [sys.executable, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env({"MEMTAPE_TRACEMALLOC_NATIVE": "1"}),
    )
    try:
        out, err = proc.communicate(timeout=WATCHDOG_S + 5)
    except subprocess.TimeoutExpired:
        stacks = native_stacks(proc.pid)
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"hung (deadlock?)\n{stacks}\n--- stderr\n{err}")
    assert proc.returncode == 0, f"exit {proc.returncode}\n--- stdout\n{out}\n--- stderr\n{err}"
    result: Result = json.loads(out.strip().splitlines()[-1])
    return result


Result = dict[str, Any]


def check(result: Result) -> None:
    assert isinstance(result["handled"], int) and result["handled"] > 100, result
    assert isinstance(result["alarms"], int) and result["alarms"] > 10, result
    assert result["held_live"] == [HELD_SIZE] * HELD, result


def test_signal_handlers_allocate_under_the_event_recorder(tmp_path: Path, sigalloc: Path) -> None:
    script = write_program(tmp_path / "signals.py", PROGRAM)
    result = run_watched([str(script), str(sigalloc), "hold-slots"])
    check(result)
    # memtape's tracemalloc holds exactly the blocks the program holds, on their line.
    assert result["held_traced"] == [[HELD_SIZE, line_of(script, "held")]] * HELD, result


@pytest.mark.parametrize("options", [(), ("--native",)], ids=["heap", "native-stacks"])
def test_signal_handlers_allocate_under_memtape_run(
    tmp_path: Path, sigalloc: Path, options: tuple[str, ...]
) -> None:
    script = write_program(tmp_path / "signals.py", PROGRAM)
    capture = tmp_path / "signals.mtape"
    result = run_watched(
        ["-m", "memtape", "run", "-q", "-o", str(capture), *options, str(script), str(sigalloc)]
    )
    check(result)
    held_line = (str(script), line_of(script, "held"))
    blocks = native_blocks(capture)
    held = [n for (size, frame), n in blocks.items() if size == HELD_SIZE]
    assert held == [HELD], blocks
    if not options:
        assert blocks[(HELD_SIZE, held_line)] == HELD, blocks
    stats = read_json("stats", capture)
    assert stats["end"]["by_source"]["native"] >= HELD * HELD_SIZE
    assert stats["totals"]["bytes_freed"] <= stats["totals"]["bytes_allocated"]
    # Only a handler's own calls (malloc, free, mmap, munmap) can find the recorder held
    # by its thread: never more than four a signal.
    missed = stats["run"]["native_missed_reentrant"]
    assert isinstance(missed, int) and 0 <= missed <= 4 * result["handled"], (missed, result)
