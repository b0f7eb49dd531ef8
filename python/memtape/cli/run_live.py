"""``memtape run --live``: the program records in a child process (``memtape run -q``)
while this process shows the live view of its capture.

The view and the program do not share a terminal: the program's standard output and
error go to ``FILE.out`` beside the capture (its standard input is empty), so that its
prints never garble the view, and the view's work (reading the capture, drawing) is not
in the recorded process. The child runs in a session of its own, so that a Ctrl-C in the
terminal reaches the view only. Quitting the view (``q``, Ctrl-C, the terminal closed)
stops the program as Ctrl-C would (SIGINT to its process group, then SIGTERM, then
SIGKILL if it will not end) and the capture ends complete, its trailer saying so; a
program that ends by itself leaves the view showing the end until ``q``."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from types import FrameType

from memtape.cli.capture_file import refuse_overwrite
from memtape.cli.run_options import program_start, run_parser
from memtape.live_view import show_live_view, terminal_problem

#: How long the child has to create the capture file.
START_WAIT_S = 30.0
#: How long the program has to end after each of SIGINT and SIGTERM.
STOP_WAIT_S = 10.0


def output_file(capture: str) -> str:
    """Where the program's output goes: ``FILE.out`` beside the capture ``FILE``."""
    return capture + ".out"


def child_argv(argv: list[str], path: str) -> list[str]:
    """``memtape run``'s arguments for the child: the same options less ``--live``, no
    summary (nothing analyzed in the program's process), the capture at ``path``."""
    start = program_start(run_parser(), argv)
    assert start is not None  # parse_run_args found the program
    ours = [a for a in argv[:start] if a != "--live"]
    return [*ours, "-q", "-o", path, *argv[start:]]


#: The signals that stop the view (and so the program): Ctrl-C, a kill, the terminal
#: closed.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _say(message: str) -> None:
    """Prints to stderr, which may be a terminal that has gone away."""
    with contextlib.suppress(OSError):
        print(message, file=sys.stderr)


def _exit_status(code: int) -> int:
    """A child's return code as a shell shows it (128 + the signal that ended it)."""
    return 128 - code if code < 0 else code


def _stop(child: subprocess.Popen[bytes]) -> None:
    """Stops the program as Ctrl-C would; SIGTERM, then SIGKILL, if it will not end."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        if child.poll() is not None:
            return
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            return
        _say(f"memtape run: stopping the program ({signal.Signals(sig).name})")
        try:
            child.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            continue


def run_live(argv: list[str], shown: str, force: bool) -> int:
    """Runs the program of ``argv`` (``memtape run``'s arguments) recording into
    ``shown`` under the live view; the program's exit status."""
    problem = terminal_problem()
    if problem is not None:
        print(f"memtape run: {problem}", file=sys.stderr)
        return 2
    output = output_file(shown)
    refuse_overwrite("run", output, force)
    path = os.path.abspath(shown)
    previous = {sig: signal.signal(sig, _interrupt) for sig in STOP_SIGNALS}
    with open(output, "wb") as out:
        child = subprocess.Popen(
            [sys.executable, "-m", "memtape", "run", *child_argv(argv, path)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + START_WAIT_S
        while not os.path.exists(path) and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if os.path.exists(path):
            note = f"the program's output goes to {output}"
            show_live_view(shown, child.pid, quit_note="stops the program", note=note)
    except KeyboardInterrupt:
        pass
    finally:
        # Stopping is not interrupted by a second Ctrl-C, kill or hang-up.
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        _stop(child)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    status = _exit_status(child.wait())
    _say(f"memtape run: the program exited with status {status}; its output is in {output}")
    if not os.path.exists(path):
        # It ended before recording began (memtape's own refusal, say): its words.
        with open(output, encoding="utf-8", errors="replace") as said:
            _say(said.read().rstrip("\n"))
    else:
        _say(f"  read the capture: memtape stats {shown}, memtape report {shown}")
    return status
