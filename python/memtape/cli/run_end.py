"""How ``memtape run`` finishes its capture on every way out of the program.

The normal ends (the program returns, raises, calls ``sys.exit``) come back to
``memtape run``'s main function. Three ways out do not, and would leave a capture cut
short: ``os._exit`` (mypy and multiprocessing's workers end so), and a signal whose
default action kills the process (SIGTERM, SIGHUP). While the capture runs:

- ``os._exit`` is wrapped: the capture is finished, then the real one runs with the
  program's status;
- SIGTERM and SIGHUP get a handler, only where the program has none of its own (the
  disposition is ``SIG_DFL``): the capture is finished, the default disposition is
  restored and the signal raised again, so the process dies by it and its parent sees
  the same status as with ``python`` (``-15`` from ``subprocess``, 143 in a shell).
  ``signal.getsignal`` and ``signal.signal`` still report ``SIG_DFL`` for them, and a
  program setting ``SIG_DFL`` again keeps the capture's handler in place.

A forked child inherits both; there they do only what the original would, since the
capture belongs to the parent. SIGINT needs nothing here: python turns it into
KeyboardInterrupt, which the main function handles.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from memtape import _mlx, _native

# Signals whose default action ends the process and that a program (or its supervisor)
# commonly sends to stop it.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
FINISH_WAIT_S = 30.0


class CaptureEnd:
    """Finishes the capture once, from whichever way out comes first."""

    def __init__(
        self,
        shown: str,
        path: str,
        quiet: bool,
        follower: _native.CaptureFollower | None = None,
        imports: str = "hide",
    ) -> None:
        self.shown, self.path, self.quiet = shown, path, quiet
        self.follower = follower
        #: Ctrl-C stopped the summary (the capture was complete): the process then ends
        #: by SIGINT, as after a Ctrl-C that ends the program.
        self.summary_interrupted = False
        #: How the summary shows import machinery (``--imports``).
        self.imports = imports
        self.pid = os.getpid()
        self._claim = threading.Lock()
        self._done = threading.Event()
        # Threads inside finish(), marked before they try the claim: a signal handler
        # run just after the claim is taken (CPython runs handlers as a C call returns)
        # must see it taken by its own thread, not wait 30 s for itself.
        self._finishers: set[int] = set()

    def disown(self) -> None:
        """The capture was ended elsewhere: every later way out leaves it alone."""
        self._claim.acquire(blocking=False)
        self._done.set()

    def finishing_here(self) -> bool:
        """Whether this thread is inside :meth:`finish` now (a signal handler may run
        between its bytecodes)."""
        return threading.get_ident() in self._finishers and not self._done.is_set()

    def finish(self, exit_kind: str, code: int) -> bool:
        """Writes the trailer (``exit_kind``, ``code``) and prints the summary. False
        when another way out already finishes it (this call then waits for that one,
        unless it is the same thread)."""
        if os.getpid() != self.pid:
            return False
        me = threading.get_ident()
        if me in self._finishers:  # called again from a handler run inside this call
            return False
        self._finishers.add(me)
        claimed = False
        try:
            claimed = self._claim.acquire(blocking=False)
            if claimed:
                self._write_end(exit_kind, code)
        finally:
            self._finishers.discard(me)
        if not claimed:
            self._done.wait(FINISH_WAIT_S)
        return claimed

    def _write_end(self, exit_kind: str, code: int) -> None:
        """The claimed part of :meth:`finish`. A Ctrl-C meanwhile (often a second one:
        the first ended the program) skips the summary, in one line, and still says how
        to read the capture, which is finished first (nothing else runs before the
        trailer: the capture would record it)."""
        try:
            events, size = self._stop(exit_kind, code)
            if not self.quiet:
                from memtape.cli.summary import print_run_summary

                print_run_summary(
                    self._shown(), events, size, follower=self.follower, imports=self.imports
                )
        except KeyboardInterrupt:
            self.summary_interrupted = True
            with contextlib.suppress(RuntimeError):  # stopped already: "no capture ..."
                self._stop(exit_kind, code)  # interrupted before the trailer was written
            if not self.quiet:
                from memtape.cli.summary import print_read_hints

                skipped = f"summary skipped; the capture is complete: {self._shown()}"
                print(f"\nmemtape: {skipped}", file=sys.stderr)
                print_read_hints(self._shown())
        finally:
            self._done.set()

    def _shown(self) -> str:
        """The capture's path as given, or absolute when the program changed directory."""
        return self.shown if os.path.exists(self.shown) else self.path

    def _stop(self, exit_kind: str, code: int) -> tuple[int, int]:
        """Writes the trailer; the events recorded and the file's size."""
        try:
            _mlx.follow("capture", False)
            return _native._stop_capture(exit_kind, code)
        except OSError as exc:  # disk full, file removed: the program's outcome stands
            print(f"memtape run: {exc}", file=sys.stderr)
            return 0, 0


def _status(status: object) -> int:
    """What ``os._exit(status)`` will exit with (0 for what it would refuse)."""
    return status if isinstance(status, int) and not isinstance(status, bool) else 0


def die_by_signal(signum: int, set_handler: Callable[[int, Any], object] = signal.signal) -> None:
    """Ends the process by ``signum`` as if memtape had never handled it: its default
    action back (through ``set_handler``, the real ``signal.signal``), then raised again
    (delivered at once to the calling thread when it does not block it), so the parent
    sees the process die by that signal."""
    set_handler(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


class ExitHooks:
    """Installs the ``os._exit`` wrapper and the signal handlers; ``remove`` undoes
    what is still ours."""

    def __init__(self, end: CaptureEnd) -> None:
        self.end = end
        self.real_exit: Callable[[int], object] = os._exit
        self.real_signal = signal.signal
        self.real_getsignal = signal.getsignal
        self.handled: set[int] = set()
        self.fork_mask: set[int | signal.Signals] | None = None

    def install(self) -> None:
        os._exit = self._exit  # type: ignore[assignment]
        for signum in STOP_SIGNALS:
            with contextlib.suppress(OSError, ValueError):
                if self.real_getsignal(signum) == signal.SIG_DFL:
                    self.real_signal(signum, self._on_signal)
                    self.handled.add(int(signum))
        if self.handled:
            signal.signal = self._signal  # type: ignore[assignment]
            signal.getsignal = self._getsignal  # type: ignore[assignment]
            os.register_at_fork(
                before=self._before_fork,
                after_in_parent=self._after_fork,
                after_in_child=self._in_child,
            )

    def remove(self) -> None:
        if os._exit == self._exit:
            os._exit = self.real_exit  # type: ignore[assignment]
        if signal.signal == self._signal:
            signal.signal = self.real_signal
        if signal.getsignal == self._getsignal:
            signal.getsignal = self.real_getsignal
        for signum in self.handled:
            with contextlib.suppress(OSError, ValueError):
                if self.real_getsignal(signum) == self._on_signal:
                    self.real_signal(signum, signal.SIG_DFL)
        self.handled.clear()

    def _shown(self, handler: object) -> object:
        return signal.SIG_DFL if handler == self._on_signal else handler

    def _getsignal(self, signalnum: int) -> object:
        """``signal.getsignal``, showing the capture's handler as ``SIG_DFL``."""
        return self._shown(self.real_getsignal(signalnum))

    def _signal(self, signalnum: int, handler: object) -> object:
        """``signal.signal``; ``SIG_DFL`` for a handled signal keeps the capture's
        handler (it acts as the default, after finishing the capture)."""
        if int(signalnum) in self.handled and handler == signal.SIG_DFL:
            handler = self._on_signal
        return self._shown(self.real_signal(signalnum, handler))  # type: ignore[arg-type]

    def _before_fork(self) -> None:
        """Blocks the handled signals across ``os.fork``: one that reached the child
        before its handlers were reset would be lost (python clears pending handler
        calls in a new child), where without memtape it would have killed it."""
        if self.handled:
            self.fork_mask = signal.pthread_sigmask(signal.SIG_BLOCK, self.handled)

    def _after_fork(self) -> None:
        if self.fork_mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self.fork_mask)
            self.fork_mask = None

    def _in_child(self) -> None:
        """A forked child gets the default dispositions back (the capture is the
        parent's), then the signals: one sent meanwhile kills it, as without memtape."""
        if self.handled:
            self.remove()
        self._after_fork()

    def _exit(self, status: int) -> None:
        """``os._exit`` while the capture runs."""
        with contextlib.suppress(BaseException):
            self.end.finish("os._exit", _status(status))
        self.real_exit(status)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        """A stop signal the program does not handle: finish, then die by it. Arriving
        while this thread finishes the capture (on its way out already: ``os._exit``, a
        multiprocessing worker told to stop and terminated at once), it lets the capture
        complete; the process then ends the way it was ending."""
        if os.getpid() == self.end.pid and self.end.finishing_here():
            return
        if os.getpid() == self.end.pid:
            with contextlib.suppress(BaseException):
                self.end.finish("signal", 128 + signum)
        die_by_signal(signum, self.real_signal)
        # Delivered to another thread and not yet acted on: end as the shell would see it.
        self.real_exit(128 + signum)
