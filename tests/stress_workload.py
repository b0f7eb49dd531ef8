"""The stress workload: memtape used the way a real multi-threaded program uses it.

Run by tests/test_stress.py under a watchdog (tests/stress_watchdog.py), never by pytest
directly. For SECONDS it runs, in one process:

- ``--threads`` allocator threads, each allocating and freeing tagged ``bytes`` blocks;
- one controller thread that starts and stops ``memtape.tracemalloc``, takes snapshots,
  records and reads memory events, clears traces, resets the peak, reads the counters and
  runs short capture files;
- one forker thread that forks children: some trace (start, allocate, snapshot, record
  events, run a capture, stop), some do nothing with memtape; each child has a hard
  timeout and is reaped.

Every process (children included) reports progress in ``DIR/hb-<pid>.json`` (one counter
per thread or step) and dumps its Python stacks to ``DIR/stacks-<pid>.txt`` on SIGUSR1, so
that the watchdog can tell which process stopped and why.

At the end the threads are quiesced, tracing is restarted once, the allocators run one
more clean round, and the traced total of the tagged line must equal exactly what the
threads still hold. The last stdout line is a JSON summary.

``--sources`` names the allocation sources to exercise (only ``python`` exists today;
native interception will add its own allocator calls here).
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import random
import signal
import sys
import threading
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import memtape
import memtape.tracemalloc as tm
from memtape import _native

warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork() with threads

CHILD_TIMEOUT_S = 30.0
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
    out = open(directory / f"stacks-{os.getpid()}.txt", "w", encoding="utf-8")  # noqa: SIM115
    faulthandler.register(signal.SIGUSR1, file=out, all_threads=True)


def make_block(size: int) -> bytes:
    return bytes(size)  # @stress:tagged


TAGGED_LINE = next(
    n for n, text in enumerate(Path(__file__).read_text(encoding="utf-8").splitlines(), 1)
    if text.rstrip().endswith("# @stress:tagged")
)


class Allocator:
    """Allocates and frees tagged blocks; holds up to a few hundred of them."""

    def __init__(self, index: int, seed: int) -> None:
        self.key = f"alloc-{index}"
        self.rng = random.Random(seed)
        self.held: list[bytes] = []

    def step(self, progress: Progress) -> None:
        rng = self.rng
        for _ in range(50):
            if len(self.held) < 300 and rng.random() < 0.55:
                self.held.append(make_block(rng.randrange(64, 4096)))
            elif self.held:
                self.held.pop(rng.randrange(len(self.held)))
        scratch = [{"k": i, "v": [i] * 4} for i in range(20)]
        del scratch
        progress.bump(self.key, 51)


class Controller:
    """Drives memtape's API at random."""

    def __init__(self, directory: Path, seed: int, *, capture: bool) -> None:
        self.directory = directory
        self.rng = random.Random(seed)
        self.capture = capture
        self.capturing = False

    def step(self, progress: Progress, tracing_started: threading.Event) -> None:
        rng = self.rng
        op = rng.choice(
            ["start", "start", "stop", "snapshot", "events", "events_off", "read_events",
             "clear", "reset_peak", "counters", "capture"]
        )
        if op == "start":
            if not tm.is_tracing():
                tracing_started.set()
            tm.start(rng.choice([1, 5, 25]))
        elif op == "stop":
            tm.stop()
        elif op == "snapshot" and tm.is_tracing():
            snapshot = tm.take_snapshot()
            snapshot.statistics("lineno")[:5]
        elif op == "events":
            memtape.record_memory_events(True, 5000, max_frames=8)
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
        progress.bump("controller")

    def toggle_capture(self) -> None:
        path = self.directory / f"capture-{os.getpid()}.mtape"
        if self.capturing:
            _native._stop_capture()
            self.capturing = False
            path.unlink()
        else:
            _native._start_capture(str(path), "{}")
            self.capturing = True

    def finish(self) -> None:
        if self.capturing:
            self.toggle_capture()
        memtape.record_memory_events(False)


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
    tm.start(5)
    progress.bump("step")
    progress.write()
    block = make_block(2000)
    tb = tm.get_object_traceback(block)
    assert tb is not None and tb[-1].lineno == TAGGED_LINE, tb
    tm.take_snapshot().statistics("lineno")
    progress.bump("step")
    progress.write()
    if kind == "events":
        memtape.record_memory_events(True, 1000)
        del block
        memtape.get_memory_events()
        memtape.record_memory_events(False)
    elif kind == "capture":
        path = directory / f"capture-{os.getpid()}.mtape"
        _native._start_capture(str(path), "{}")
        junk = [bytes(100) for _ in range(100)]
        del junk
        _native._stop_capture()
        assert path.stat().st_size > 0
        path.unlink()
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
    parser.add_argument("--sources", default="python", help="comma-separated: python")
    parser.add_argument("--no-capture", action="store_true")
    parser.add_argument(
        "--fork-at-first-start", action="store_true",
        help="the issue-12 scenario: fork a burst of tracing children the moment the "
             "controller first starts tracing",
    )
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    sources = set(args.sources.split(","))
    if sources != {"python"}:
        raise SystemExit(f"unknown sources {sorted(sources - {'python'})}")
    directory: Path = args.directory
    progress = Progress(directory, "workload")
    watch_stacks(directory)
    stop = threading.Event()
    quiesce = threading.Event()
    tracing_started = threading.Event()
    paused = threading.Barrier(args.threads + 1)
    errors: list[str] = []
    forks: dict[str, int] = {}
    child_failures: list[int] = []
    allocators = [Allocator(i, args.seed + i) for i in range(args.threads)]
    controller = Controller(directory, args.seed, capture=not args.no_capture)

    def guarded(name: str, body: Any) -> Any:
        def run() -> None:
            try:
                body()
            except BaseException:
                errors.append(f"{name}: {traceback.format_exc()}")
                stop.set()
        return threading.Thread(target=run, name=name, daemon=True)

    def allocate(a: Allocator) -> None:
        while not stop.is_set() and not quiesce.is_set():
            a.step(progress)
        try:
            paused.wait()  # the main thread restarts tracing in between
            a.held.clear()
            paused.wait()
        except threading.BrokenBarrierError:
            return  # something failed: no final round
        while not stop.is_set():
            a.step(progress)

    def control() -> None:
        while not stop.is_set() and not quiesce.is_set():
            controller.step(progress, tracing_started)
        controller.finish()

    def fork_loop() -> None:
        rng = random.Random(args.seed * 7)
        kinds = ["trace", "trace", "events", "capture", "plain"]
        if args.fork_at_first_start:
            # A burst of tracing children while the controller's first start() runs.
            tracing_started.wait()
            burst = time.monotonic()
            pids = [spawn_child(directory, "trace") for _ in range(8)]
            for pid in pids:
                code = reap_child(pid, burst)
                forks["trace"] = forks.get("trace", 0) + 1
                progress.bump("forker")
                if code != 0:
                    child_failures.append(code)
        while not stop.is_set() and not quiesce.is_set():
            kind = rng.choice(kinds if not args.no_capture else kinds[:3] + kinds[4:])
            code = reap_child(spawn_child(directory, kind), time.monotonic())
            forks[kind] = forks.get(kind, 0) + 1
            progress.bump("forker")
            if code != 0:
                child_failures.append(code)
            time.sleep(rng.random() * 0.05)

    def heartbeat() -> None:
        while not progress.done:
            progress.bump("heartbeat")
            progress.write()
            time.sleep(HEARTBEAT_EVERY_S)

    threads = [guarded(a.key, lambda a=a: allocate(a)) for a in allocators]
    workers = [guarded("controller", control), guarded("forker", fork_loop)]
    beat = guarded("heartbeat", heartbeat)
    beat.start()
    started = time.monotonic()
    for t in threads + workers:
        t.start()
    deadline = started + args.seconds
    while time.monotonic() < deadline and not stop.is_set():
        time.sleep(0.05)
    chaos_s = time.monotonic() - started

    # The final check: quiesce, restart tracing once, one clean round, compare.
    quiesce.set()
    for t in workers:
        t.join()
    check: dict[str, Any] = {}
    if stop.is_set():
        paused.abort()
    else:
        paused.wait()
        tm.stop()
        tm.start(1)
        paused.wait()
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join()
        held = [b for a in allocators for b in a.held]
        expected = sum(sys.getsizeof(b) for b in held)
        tagged = [
            s for s in tm.take_snapshot().statistics("lineno")
            if s.traceback[0].filename == __file__ and s.traceback[0].lineno == TAGGED_LINE
        ]
        traced = sum(s.size for s in tagged)
        count = sum(s.count for s in tagged)
        check = {"held_blocks": len(held), "held_bytes": expected,
                 "traced_blocks": count, "traced_bytes": traced}
        if (traced, count) != (expected, len(held)):
            errors.append(f"traced totals differ from what the threads hold: {check}")
        tm.stop()
    stop.set()
    for t in threads:
        t.join()
    progress.done = True
    beat.join()
    progress.write()
    if child_failures:
        errors.append(f"forked children failed with exit codes {child_failures}")
    summary = {
        "python": "%d.%d" % sys.version_info[:2],
        "seconds": round(chaos_s, 2),
        "threads": args.threads,
        "sources": sorted(sources),
        "ops": {k: v for k, v in progress.counts.items() if k != "heartbeat"},
        "ops_total": sum(v for k, v in progress.counts.items() if k != "heartbeat"),
        "forks": forks,
        "check": check,
        "errors": errors,
    }
    print(json.dumps(summary), flush=True)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
