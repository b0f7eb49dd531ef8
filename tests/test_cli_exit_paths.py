"""Every way out of a program leaves a complete capture that says how it ended, and the
exit status is python's own (issue 9, item 4).

Each program keeps 500 blocks of 1,000 bytes alive from one line before it leaves; the
capture must have its trailer (not cut short), those 500 blocks at that line at the
end, the recorded end reason and status, and ``memtape run`` must exit as plain
``python`` does with the same program.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from child_python import child_env, describe
from memtape.cli.run_end import FINISH_WAIT_S
from memtape_cli import Site, memtape, python, read_json, write_program

KEEP = """
import os, signal, sys, threading, time
keep = [bytearray(1000) for _ in range(500)]  # @keep
"""
KEEP_LINE = 2


def ended(
    tmp_path: Path, name: str, tail: str, plain_status: int | None = None
) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
    """Records ``KEEP + tail``; checks the exit status against plain python's and that
    the capture is complete with the kept blocks. Returns the stats and memtape's run."""
    script = write_program(tmp_path / f"{name}.py", KEEP + tail)
    capture = tmp_path / f"{name}.mtape"
    result = memtape("run", "-q", "-o", capture, script)
    plain = python(script)
    assert result.returncode == plain.returncode, describe(result)
    if plain_status is not None:
        assert plain.returncode == plain_status, describe(plain)
    assert result.stdout == plain.stdout
    stats = read_json("stats", capture)
    assert stats["run"]["cut_short"] is False, stats["run"]
    kept = [s for s in map(Site.of, read_json("top", capture, "--at", "end")["sites"])]
    at_keep = [s for s in kept if s.at(script, KEEP_LINE)]
    assert at_keep and at_keep[0].count >= 500 and at_keep[0].bytes >= 500_000, kept[:5]
    return stats, result


def test_os_exit(tmp_path: Path) -> None:
    stats, _ = ended(tmp_path, "os_exit", "print('bye', flush=True)\nos._exit(3)\n", 3)
    assert (stats["run"]["exit"], stats["run"]["exit_code"]) == ("os._exit", 3)


def test_os_exit_from_a_thread(tmp_path: Path) -> None:
    tail = "threading.Thread(target=os._exit, args=(4,)).start()\ntime.sleep(30)\n"
    stats, _ = ended(tmp_path, "os_exit_thread", tail, 4)
    assert (stats["run"]["exit"], stats["run"]["exit_code"]) == ("os._exit", 4)


@pytest.fixture
def signals_at_default() -> Iterator[None]:
    """Children start with the default disposition of the stop signals even when the test
    run ignores one (under ``nohup``, SIGHUP is ignored, and an ignored signal stays
    ignored across exec: plain python would then survive its own SIGHUP)."""
    ignored = [
        s
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
        if signal.getsignal(s) == signal.SIG_IGN
    ]
    for s in ignored:
        signal.signal(s, signal.SIG_DFL)
    try:
        yield
    finally:
        for s in ignored:
            signal.signal(s, signal.SIG_IGN)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
@pytest.mark.usefixtures("signals_at_default")
def test_a_signal_the_program_does_not_handle(tmp_path: Path, signum: signal.Signals) -> None:
    tail = f"os.kill(os.getpid(), {int(signum)})\ntime.sleep(30)\n"
    stats, _ = ended(tmp_path, signum.name, tail, -int(signum))
    assert (stats["run"]["exit"], stats["run"]["exit_code"]) == ("signal", 128 + signum)


def wait_until_asleep(pid: int, timeout: float = 20.0) -> None:
    """Returns once ``pid``'s main thread sleeps in the kernel (``time.sleep``).

    A SIGTERM that lands between the program's last eval-breaker check and its sleep
    only trips CPython's flag, and the Python-level handler memtape installs runs when
    the sleep ends (CPython's own race for any Python handler; plain python dies at once
    by the default action). This test is about a program already blocked.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/wchan", encoding="ascii") as wchan:
            if "nanosleep" in wchan.read():
                return
        time.sleep(0.01)
    pytest.fail(f"process {pid} never slept")


def test_sigterm_from_outside_while_blocked(tmp_path: Path) -> None:
    """The usual case: a supervisor stops a program waiting in sleep."""
    script = write_program(
        tmp_path / "waits.py", KEEP + "print('ready', flush=True)\ntime.sleep(60)\n"
    )
    capture = tmp_path / "waits.mtape"
    cmd = [sys.executable, "-m", "memtape", "run", "-q", "-o", str(capture), str(script)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=child_env())
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        wait_until_asleep(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == -signal.SIGTERM
    finally:
        proc.kill()
        proc.communicate()
    stats = read_json("stats", capture)
    assert stats["run"]["cut_short"] is False
    assert (stats["run"]["exit"], stats["run"]["exit_code"]) == ("signal", 143)
    assert stats["totals"]["allocs"] >= 500


def test_a_program_handler_stays_the_programs(tmp_path: Path) -> None:
    """A program with its own SIGTERM handler keeps it: memtape installs none there."""
    tail = """
def on_term(signum, frame):
    print("handled", signum, signal.getsignal(signal.SIGHUP) is signal.SIG_DFL, flush=True)
    sys.exit(7)
signal.signal(signal.SIGTERM, on_term)
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(30)
"""
    stats, result = ended(tmp_path, "own_handler", tail, 7)
    assert result.stdout.startswith("handled 15")
    assert (stats["run"]["exit"], stats["run"]["exit_code"]) == ("normal", 7)


def test_sys_exit_from_a_thread(tmp_path: Path) -> None:
    """``sys.exit`` in a thread ends only that thread; the program goes on."""
    tail = """
worker = threading.Thread(target=sys.exit, args=(5,))
worker.start(); worker.join()
more = [bytearray(100) for _ in range(10)]
print("after", flush=True)
"""
    stats, result = ended(tmp_path, "thread_exit", tail, 0)
    assert result.stdout == "after\n"
    assert (stats["run"]["exit"], stats["run"]["exit_code"]) == ("normal", 0)


def test_an_exception_in_an_atexit_handler(tmp_path: Path) -> None:
    """python reports it and exits 0; what the handlers allocate is recorded."""
    tail = """
import atexit
late = []
def fails():
    raise RuntimeError("in atexit")
def allocates():
    late.extend(bytearray(2000) for _ in range(50))  # @late
atexit.register(fails)
atexit.register(allocates)
"""
    stats, result = ended(tmp_path, "atexit_raises", tail, 0)
    assert "RuntimeError: in atexit" in result.stderr, describe(result)
    assert (stats["run"]["exit"], stats["run"]["exit_code"]) == ("normal", 0)
    late_line = KEEP.count("\n") + tail.count("\n", 0, tail.index("# @late"))
    script = tmp_path / "atexit_raises.py"
    rows = map(Site.of, read_json("top", tmp_path / "atexit_raises.mtape", "--at", "end")["sites"])
    assert any(s.at(script, late_line) and s.count >= 50 for s in rows)


def test_a_multiprocessing_child_ended_by_sigterm(tmp_path: Path) -> None:
    """The program's child is SIGTERM'd (as ``Pool`` does to idle workers): the parent's
    capture is complete. (Children are not followed yet: the capture is the parent's.)"""
    tail = """
import multiprocessing as mp
if __name__ == "__main__":
    for method in ("fork", "spawn", "forkserver"):
        child = mp.get_context(method).Process(target=time.sleep, args=(60,))
        child.start()
        child.terminate()
        child.join()
        print(method, child.exitcode, flush=True)
"""
    stats, result = ended(tmp_path, "mp_child", tail, 0)
    assert result.stdout == "fork -15\nspawn -15\nforkserver -15\n"
    assert (stats["run"]["exit"], stats["run"]["exit_code"]) == ("normal", 0)


@pytest.mark.usefixtures("signals_at_default")
def test_sigterm_just_after_os_exit_takes_the_capture(tmp_path: Path) -> None:
    """A SIGTERM handled in the very instant ``os._exit`` has claimed the capture (a
    ``Pool`` worker told to stop and terminated at once): the handler finds its own thread
    finishing and lets it, instead of waiting 30 s for itself and dying with the capture
    cut short. The claim here raises the signal once it is taken; CPython runs the handler
    as that C call returns, before ``finish`` takes another step."""
    tail = """
end = os._exit.__self__.end  # memtape run's wrapper of os._exit, bound to its CaptureEnd
class SignalledOnceTaken:
    def __init__(self, lock):
        self.lock = lock
    def acquire(self, blocking=True):
        taken = self.lock.acquire(blocking)
        if taken:
            signal.raise_signal(signal.SIGTERM)
        return taken
end._claim = SignalledOnceTaken(end._claim)
print("exiting", flush=True)
os._exit(6)
"""
    script = write_program(tmp_path / "term_in_exit.py", KEEP + tail)
    capture = tmp_path / "term_in_exit.mtape"
    started = time.monotonic()
    result = memtape("run", "-q", "-o", capture, script)
    took = time.monotonic() - started
    assert (result.returncode, result.stdout) == (6, "exiting\n"), describe(result)
    assert took < FINISH_WAIT_S / 2, took
    stats = read_json("stats", capture)
    assert stats["run"]["cut_short"] is False, stats["run"]
    assert (stats["run"]["exit"], stats["run"]["exit_code"]) == ("os._exit", 6)
    assert stats["totals"]["allocs"] >= 500
