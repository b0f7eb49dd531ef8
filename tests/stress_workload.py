"""The stress workload: memtape used the way a real multi-threaded program uses it.

Run by tests/test_stress.py under a watchdog (tests/stress_watchdog.py), never by pytest
directly. For SECONDS it runs, in one process:

- ``--threads`` allocator threads, each allocating and freeing tagged ``bytes`` blocks;
- one controller thread that starts and stops ``memtape.tracemalloc``, takes snapshots,
  records and reads memory events, clears traces, resets the peak, reads the counters,
  runs short capture files and allocates NumPy arrays (memtape's NumPy handler is
  installed and removed as recording starts and stops);
- one forker thread that forks children: some trace (start, allocate Python objects and
  a NumPy array, snapshot, record events, run a capture, stop), some do nothing with
  memtape; each child has a hard timeout and is reaped.

Every process (children included) reports progress in ``DIR/hb-<pid>.json`` (one counter
per thread or step) and dumps its Python stacks to ``DIR/stacks-<pid>.txt`` on SIGUSR1, so
that the watchdog can tell which process stopped and why.

At the end the threads are quiesced, tracing is restarted once, the allocators run one
more clean round, and the traced total of the tagged line must equal exactly what the
threads still hold. The last stdout line is a JSON summary.

``--sources`` names the allocation sources to exercise: ``python`` (the tagged ``bytes``
blocks) and ``native``: the allocator threads also call a gcc-built C library
(tests/native/nativealloc.c, through ctypes, so with the GIL released) that mallocs,
reallocs, frees, mmaps and munmaps; the controller then starts native interception with
everything it starts (tracemalloc with ``MEMTAPE_TRACEMALLOC_NATIVE=1``, event recordings
with the ``native`` source, captures with ``native=True``), the forked children too, and
the final check also compares the native domain's traced blocks on the native call lines
with what the threads still hold natively.
"""

from __future__ import annotations

import argparse
import ctypes
import faulthandler
import functools
import json
import os
import platform
import random
import signal
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import memtape
import memtape.tracemalloc as tm
import numpy as np
from memtape import _native
from native_lib import build_alloc, native_blocks

warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork() with threads

CHILD_TIMEOUT_S = 30.0
NUMPY_DOMAIN = _native.NUMPY_DOMAIN
NATIVE_DOMAIN = _native.NATIVE_DOMAIN
PAGE = 4096
BURST_MAX = 40
HEARTBEAT_EVERY_S = 0.2


class Progress:
    """This process' counters, written to its heartbeat file."""

    def __init__(self, directory: Path, role: str) -> None:
        self.path = directory / f"hb-{os.getpid()}.json"
        self.role = role
        self.counts: dict[str, int] = {}
        self.done = False

    def bump(self, key: str, by: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + by

    def write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        record = {"pid": os.getpid(), "role": self.role, "counts": dict(self.counts),
                  "done": self.done}
        tmp.write_text(json.dumps(record), encoding="utf-8")
        os.replace(tmp, self.path)


def watch_stacks(directory: Path) -> None:
    """SIGUSR1 dumps every thread's Python stack to DIR/stacks-<pid>.txt."""
    out = open(directory / f"stacks-{os.getpid()}.txt", "w", encoding="utf-8")
    faulthandler.register(signal.SIGUSR1, file=out, all_threads=True)


def make_block(size: int) -> bytes:
    return bytes(size)  # @stress:tagged


def tagged_lines(tag: str) -> list[int]:
    return [
        n for n, text in enumerate(Path(__file__).read_text(encoding="utf-8").splitlines(), 1)
        if text.rstrip().endswith(tag)
    ]


TAGGED_LINE = tagged_lines("# @stress:tagged")[0]


class NativeLib:
    """The C library's allocator calls (ctypes releases the GIL around each); every call
    that makes a block is on a line tagged ``@stress:native``."""

    def __init__(self, path: Path) -> None:
        lib = ctypes.CDLL(str(path))
        size, ptr = ctypes.c_size_t, ctypes.c_void_p
        for name, argtypes, restype in [
            ("na_malloc", [size], ptr), ("na_realloc", [ptr, size], ptr),
            ("na_free", [ptr], None), ("na_mmap", [size], ptr),
            ("na_munmap", [ptr, size], ctypes.c_long),
        ]:
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = argtypes, restype
        self.lib = lib

    def malloc(self, size: int) -> int:
        p: int | None = self.lib.na_malloc(size)  # @stress:native
        assert p, size
        return p

    def realloc(self, p: int, size: int) -> int:
        q: int | None = self.lib.na_realloc(p, size)  # @stress:native
        assert q, size
        return q

    def mmap(self, size: int) -> int:
        p: int | None = self.lib.na_mmap(size)  # @stress:native
        assert p, size
        return p

    def release(self, p: int, size: int, mapped: bool) -> None:
        if mapped:
            assert self.lib.na_munmap(p, size) == 0
        else:
            self.lib.na_free(p)


NATIVE_LINES = tagged_lines("# @stress:native")
NATIVE: NativeLib | None = None  # set by main() when ``native`` is among the sources


def native_domain_on() -> None:
    """Every later ``tm.start()`` (forked children's too) traces native blocks."""
    os.environ["MEMTAPE_TRACEMALLOC_NATIVE"] = "1"


class Allocator:
    """Allocates and frees tagged blocks; holds up to a few hundred of them."""

    def __init__(self, index: int, seed: int) -> None:
        self.key = f"alloc-{index}"
        self.native_key = f"native-{index}"
        self.rng = random.Random(seed)
        self.held: list[bytes] = []
        #: native blocks held: address -> (size, mapped)
        self.native: dict[int, tuple[int, bool]] = {}

    def step(self, progress: Progress) -> None:
        rng = self.rng
        for _ in range(50):
            if len(self.held) < 300 and rng.random() < 0.55:
                self.held.append(make_block(rng.randrange(64, 4096)))
            elif self.held:
                self.held.pop(rng.randrange(len(self.held)))
        scratch = [{"k": i, "v": [i] * 4} for i in range(20)]
        del scratch
        progress.bump(self.key, 50)  # tagged blocks allocated or freed
        if NATIVE is not None:
            self.native_step(NATIVE)
            progress.bump(self.native_key, 10)  # native calls that make or free a block

    def native_step(self, lib: NativeLib) -> None:
        rng = self.rng
        held = self.native
        for _ in range(10):
            roll = rng.random()
            if len(held) < 100 and roll < 0.4:
                size = rng.randrange(1, 8192)
                held[lib.malloc(size)] = (size, False)
            elif len(held) < 100 and roll < 0.45:
                size = PAGE * rng.randrange(1, 5)
                held[lib.mmap(size)] = (size, True)
            elif held and roll < 0.7:
                p = rng.choice(list(held))
                size, mapped = held[p]
                if mapped:
                    continue
                del held[p]
                size = rng.randrange(1, 16384)
                held[lib.realloc(p, size)] = (size, False)
            elif held:
                p = rng.choice(list(held))
                size, mapped = held.pop(p)
                lib.release(p, size, mapped)

    def release_native(self) -> None:
        if NATIVE is not None:
            for p, (size, mapped) in self.native.items():
                NATIVE.release(p, size, mapped)
        self.native.clear()


class Controller:
    """Drives memtape's API at random."""

    def __init__(self, directory: Path, seed: int, *, capture: bool) -> None:
        self.directory = directory
        self.rng = random.Random(seed)
        self.capture = capture
        self.capturing = False
        self.sources = ("python", "native") if NATIVE is not None else ("python",)

    def step(self, progress: Progress, recording_starts: threading.Event) -> None:
        rng = self.rng
        op = rng.choice(
            ["start", "start", "stop", "snapshot", "events", "events_off", "read_events",
             "clear", "reset_peak", "counters", "capture"]
        )
        if op in ("start", "events", "capture"):
            recording_starts.set()  # the first one (lazily) set memtape's NumPy support up
        if op == "start":
            tm.start(rng.choice([1, 5, 25]))
        elif op == "stop":
            tm.stop()
        elif op == "snapshot" and tm.is_tracing():
            snapshot = tm.take_snapshot()
            snapshot.statistics("lineno")[:5]
        elif op == "events":
            memtape.record_memory_events(True, 5000, max_frames=8, sources=self.sources)
        elif op == "events_off":
            memtape.record_memory_events(False)
        elif op == "read_events":
            events = memtape.get_memory_events()
            assert all("action" in e for e in events[:50])
        elif op == "clear":
            tm.clear_traces()
        elif op == "reset_peak":
            tm.reset_peak()
        elif op == "counters":
            current, peak = tm.get_traced_memory()
            assert current <= peak or not tm.is_tracing(), (current, peak)
            tm.get_tracemalloc_memory()
        elif op == "capture" and self.capture:
            self.toggle_capture()
        np.ones(rng.randrange(1, 4096))  # NumPy buffers while the handler comes and goes
        progress.bump("controller")

    def toggle_capture(self) -> None:
        path = self.directory / f"capture-{os.getpid()}.mtape"
        if self.capturing:
            _native._stop_capture()
            self.capturing = False
            path.unlink()
        else:
            _native._start_capture(str(path), "{}", 0, NATIVE is not None)
            self.capturing = True

    def finish(self) -> None:
        if self.capturing:
            self.toggle_capture()
        memtape.record_memory_events(False)


def child_records(directory: Path, kind: str, held: list[bytes]) -> None:
    """An ``events`` or ``capture`` child's recording (native too when asked for); an
    ``events`` child frees the blocks ``held`` while recording."""
    if kind == "events":
        memtape.record_memory_events(
            True, 1000, sources=("python", "native") if NATIVE else ("python",))
        held.clear()
        if NATIVE is not None:
            NATIVE.release(NATIVE.malloc(5003), 5003, False)
            events = memtape.get_memory_events()
            assert any(e["device"] == -2 and e["size"] == 5003 for e in events), events[-20:]
        memtape.get_memory_events()
        memtape.record_memory_events(False)
    elif kind == "capture":
        path = directory / f"capture-{os.getpid()}.mtape"
        _native._start_capture(str(path), "{}", 0, NATIVE is not None)
        junk = [bytes(100) for _ in range(100)]
        del junk
        kept = NATIVE.malloc(7001) if NATIVE is not None else 0
        _native._stop_capture()
        assert path.stat().st_size > 0
        if NATIVE is not None:
            live = native_blocks(path)
            assert live[(7001, (__file__, NATIVE_LINES[0]))] == 1, live
            NATIVE.release(kept, 7001, False)
        path.unlink()


def child_main(directory: Path, kind: str) -> int:
    """A forked child's life; returns its exit code."""
    progress = Progress(directory, "child-" + kind)
    watch_stacks(directory)
    progress.bump("forked")
    progress.write()
    if kind == "plain":
        junk = [bytes(100) for _ in range(100)]
        del junk
        progress.bump("step")
        progress.done = True
        progress.write()
        return 0
    # A child of a tracing parent traces already, but memtape's NumPy handler belongs to
    # the NumPy context (thread) that started tracing (NEP 49): restart here.
    tm.stop()
    tm.start(5)
    progress.bump("step")
    progress.write()
    block = make_block(2000)
    tb = tm.get_object_traceback(block)
    assert tb is not None and tb[-1].lineno == TAGGED_LINE, tb
    array = np.ones(1000)  # through memtape's NumPy handler, installed on start()
    snapshot = tm.take_snapshot()
    snapshot.statistics("lineno")
    numpy_bytes = [t.size for t in snapshot.traces if t.domain == NUMPY_DOMAIN]
    assert array.nbytes in numpy_bytes, numpy_bytes
    if NATIVE is not None:
        native_block = NATIVE.malloc(3001)
        native = [(t.size, t.traceback[-1].lineno) for t in tm.take_snapshot().traces
                  if t.domain == NATIVE_DOMAIN and t.traceback[-1].filename == __file__]
        assert (3001, NATIVE_LINES[0]) in native, native
        NATIVE.release(native_block, 3001, False)
    progress.bump("step")
    progress.write()
    held = [block]
    del block
    child_records(directory, kind, held)
    progress.bump("step")
    progress.write()
    tm.stop()
    progress.bump("step")
    progress.done = True
    progress.write()
    return 0


def spawn_child(directory: Path, kind: str) -> int:
    """Forks one child of `kind`; returns its pid."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = child_main(directory, kind)
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
        finally:
            os._exit(code)
    return pid


def reap_child(pid: int, started: float) -> int:
    """The child's exit code (-1: killed CHILD_TIMEOUT_S after it `started`)."""
    deadline = started + CHILD_TIMEOUT_S
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return -1
        time.sleep(0.002)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("directory", type=Path)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=6)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--sources", default="python",
                        help="comma-separated: python, native")
    parser.add_argument("--no-capture", action="store_true")
    parser.add_argument(
        "--switch-interval", type=float, default=None,
        help="sys.setswitchinterval: smaller means more thread interleavings",
    )
    parser.add_argument(
        "--fork-at-first-start", action="store_true",
        help="the issue-12 scenario: fork tracing children back to back while the "
             "controller first starts recording (tracing, events or a capture)",
    )
    return parser.parse_args(argv)


class Workload:
    """The threads of the workload process and what they share."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.directory: Path = args.directory
        self.progress = Progress(self.directory, "workload")
        self.stop = threading.Event()
        self.quiesce = threading.Event()
        self.recording_starts = threading.Event()
        self.bursting = threading.Event()
        self.first_recorded = threading.Event()
        self.paused = threading.Barrier(args.threads + 1)
        self.errors: list[str] = []
        self.forks: dict[str, int] = {}
        self.child_failures: list[int] = []
        self.allocators = [Allocator(i, args.seed + i) for i in range(args.threads)]
        self.controller = Controller(self.directory, args.seed, capture=not args.no_capture)

    def thread(self, name: str, body: Callable[[], None]) -> threading.Thread:
        """A thread whose failure is reported and stops the run."""

        def run() -> None:
            try:
                body()
            except BaseException:
                self.errors.append(f"{name}: {traceback.format_exc()}")
                self.stop.set()

        return threading.Thread(target=run, name=name, daemon=True)

    def allocate(self, a: Allocator) -> None:
        while not self.stop.is_set() and not self.quiesce.is_set():
            a.step(self.progress)
        try:
            self.paused.wait()  # the main thread restarts tracing in between
            a.held.clear()
            a.release_native()
            self.paused.wait()
        except threading.BrokenBarrierError:
            return  # something failed: no final round
        while not self.stop.is_set():
            a.step(self.progress)

    def control(self) -> None:
        if self.args.fork_at_first_start:
            self.bursting.wait()
        while not self.stop.is_set() and not self.quiesce.is_set():
            self.controller.step(self.progress, self.recording_starts)
            if self.recording_starts.is_set():
                self.first_recorded.set()
        self.first_recorded.set()
        self.controller.finish()

    def count_child(self, kind: str, code: int) -> None:
        self.forks[kind] = self.forks.get(kind, 0) + 1
        self.progress.bump("forker")
        if code != 0:
            self.child_failures.append(code)

    def fork_loop(self) -> None:
        rng = random.Random(self.args.seed * 7)
        kinds = ["trace", "trace", "events", "plain"] + ([] if self.args.no_capture
                                                          else ["capture"])
        if self.args.fork_at_first_start:
            # Tracing children forked back to back until the controller's first start of
            # a recording (tracing, events or a capture) has returned, and two more.
            burst = time.monotonic()
            pids = [spawn_child(self.directory, "trace")]
            self.bursting.set()
            while not self.first_recorded.is_set() and len(pids) < BURST_MAX:
                pids.append(spawn_child(self.directory, "trace"))
            pids += [spawn_child(self.directory, "trace") for _ in range(2)]
            for pid in pids:
                self.count_child("trace", reap_child(pid, burst))
        while not self.stop.is_set() and not self.quiesce.is_set():
            kind = rng.choice(kinds)
            self.count_child(kind, reap_child(spawn_child(self.directory, kind),
                                              time.monotonic()))
            time.sleep(rng.random() * 0.05)

    def heartbeat(self) -> None:
        while not self.progress.done:
            self.progress.bump("heartbeat")
            self.progress.write()
            time.sleep(HEARTBEAT_EVERY_S)

    def final_check(self, allocating: list[threading.Thread]) -> dict[str, int]:
        """Restarts tracing once with the allocators paused, lets them run a clean round,
        and compares the tagged line's traced total with what they hold."""
        self.paused.wait()
        tm.stop()
        tm.start(1)
        self.paused.wait()
        time.sleep(0.5)
        self.stop.set()
        for t in allocating:
            t.join()
        held = [b for a in self.allocators for b in a.held]
        snapshot = tm.take_snapshot()
        tagged = [
            s for s in snapshot.statistics("lineno")
            if s.traceback[0].filename == __file__ and s.traceback[0].lineno == TAGGED_LINE
        ]
        native_traced = sorted(
            t.size for t in snapshot.filter_traces([tm.DomainFilter(True, NATIVE_DOMAIN)]).traces
            if t.traceback[0].filename == __file__ and t.traceback[0].lineno in NATIVE_LINES
        )
        tm.stop()
        check = {"held_blocks": len(held), "held_bytes": sum(sys.getsizeof(b) for b in held),
                 "traced_blocks": sum(s.count for s in tagged),
                 "traced_bytes": sum(s.size for s in tagged)}
        if (check["traced_blocks"], check["traced_bytes"]) != (
                check["held_blocks"], check["held_bytes"]):
            self.errors.append(f"traced totals differ from what the threads hold: {check}")
        if NATIVE is not None:
            native_held = sorted(size for a in self.allocators for size, _ in a.native.values())
            check |= {"native_held_blocks": len(native_held),
                      "native_held_bytes": sum(native_held),
                      "native_traced_blocks": len(native_traced),
                      "native_traced_bytes": sum(native_traced)}
            if native_traced != native_held:
                self.errors.append(
                    f"traced native blocks differ from what the threads hold: {check}")
        return check

    def run(self) -> dict[str, Any]:
        allocating = [self.thread(a.key, functools.partial(self.allocate, a))
                      for a in self.allocators]
        workers = [self.thread("controller", self.control),
                   self.thread("forker", self.fork_loop)]
        beat = self.thread("heartbeat", self.heartbeat)
        beat.start()
        started = time.monotonic()
        for t in allocating + workers:
            t.start()
        deadline = started + self.args.seconds
        while time.monotonic() < deadline and not self.stop.is_set():
            time.sleep(0.05)
        chaos_s = time.monotonic() - started
        self.quiesce.set()
        for t in workers:
            t.join()
        check: dict[str, int] = {}
        if self.stop.is_set():
            self.paused.abort()
        else:
            check = self.final_check(allocating)
        self.stop.set()
        for t in allocating:
            t.join()
        for a in self.allocators:
            a.release_native()
        self.progress.done = True
        beat.join()
        self.progress.write()
        if self.child_failures:
            self.errors.append(f"forked children failed with exit codes {self.child_failures}")
        ops = {k: v for k, v in self.progress.counts.items() if k != "heartbeat"}
        return {
            "python": platform.python_version(),
            "seconds": round(chaos_s, 2),
            "threads": self.args.threads,
            "sources": self.args.sources.split(","),
            "ops": ops,
            "ops_total": sum(ops.values()),
            "forks": self.forks,
            "check": check,
            "errors": self.errors,
        }


def main(argv: list[str]) -> int:
    global NATIVE
    args = parse_args(argv)
    sources = set(args.sources.split(","))
    unknown = sources - {"python", "native"}
    if unknown:
        raise SystemExit(f"unknown sources {sorted(unknown)}")
    if "native" in sources:
        NATIVE = NativeLib(build_alloc(args.directory))
        native_domain_on()
    watch_stacks(args.directory)
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    summary = Workload(args).run()
    print(json.dumps(summary), flush=True)
    return 1 if summary["errors"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
