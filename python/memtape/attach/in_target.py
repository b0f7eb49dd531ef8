"""The payload ``memtape attach`` runs inside the target process (through PEP 768 or
gdb; see ``bootstrap.py``), on the target's main thread at a point where it may run
Python code.

It starts a capture with the same call ``memtape run`` makes (``_native._start_capture``
with the same metadata), after a census of the objects already alive, and leaves one
daemon thread, ``memtape-attach``, waiting on the session's control FIFO. That thread
ends the capture (``_native._stop_capture``, as ``memtape run`` does) when
``memtape detach`` writes ``stop``, when ``--duration`` has passed, or, through an
``atexit`` handler, when the target exits first; it then removes everything memtape put
in the target (the handler, itself; the capture's hooks go with the capture) and says
so in ``ended.json``. memtape's own work (the census, the thread) is never recorded."""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import sys
import threading
import time
from typing import Any

from memtape import _native
from memtape.attach import object_census
from memtape.attach.session_files import SessionFiles, write_json
from memtape.capture_metadata import capture_metadata

THREAD_NAME = "memtape-attach"
#: How long the payload waits for its thread to start (it starts at once).
THREAD_START_S = 10.0


class AttachedCapture:
    """The capture the payload started, and the one way it ends."""

    def __init__(self, files: SessionFiles, duration: float | None) -> None:
        self.files = files
        self.duration = duration
        self.ready = threading.Event()
        self.failed = threading.Event()
        self._claim = threading.Lock()
        self.native_id: int | None = None
        #: The process recorded: a child forked meanwhile inherits the atexit handler
        #: but not the capture (the recorder stops in a forked child).
        self.pid = os.getpid()

    def watch(self) -> None:
        """The thread: waits for ``stop`` or the duration, then ends the capture."""
        token = _native._own_work_begin()
        try:
            self.native_id = threading.get_native_id()
            fd = os.open(self.files.control, os.O_RDWR | os.O_NONBLOCK)
            try:
                self.ready.set()
                reason = self._wait(fd)
            finally:
                os.close(fd)
            if reason is not None:
                self.finish(reason)
        finally:
            _native._work_end(token)

    def _wait(self, fd: int) -> str | None:
        """Until a stop request (``detached``), the end of the duration (``duration``)
        or a failed start (None)."""
        deadline = None if self.duration is None else time.monotonic() + self.duration
        while not self.failed.is_set():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            readable, _, _ = select.select([fd], [], [], left)
            if readable:
                with contextlib.suppress(BlockingIOError):
                    if b"stop" in os.read(fd, 64):
                        return "detached"
            elif deadline is not None and time.monotonic() >= deadline:
                return "duration"
        return None

    def finish(self, reason: str) -> None:
        """Ends the capture once (the thread or the target's exit, whichever is first)
        and removes memtape's atexit handler; writes ``ended.json`` last."""
        if os.getpid() != self.pid or not self._claim.acquire(blocking=False):
            return
        token = _native._own_work_begin()
        try:
            atexit.unregister(self.finish_at_exit)
            ended: dict[str, Any] = {"exit": reason}
            try:
                # No exit status: detached or timed out, the target goes on; at its
                # exit, atexit runs before the status is known.
                events, size = _native._stop_capture(reason, None)
                ended |= {"events": events, "bytes": size}
            except (RuntimeError, OSError) as exc:
                ended["error"] = str(exc)
            with contextlib.suppress(OSError):
                os.remove(self.files.control)
            ended["thread"] = self.native_id
            with contextlib.suppress(OSError):
                write_json(self.files.ended, ended)
        finally:
            _native._work_end(token)

    def finish_at_exit(self) -> None:
        self.finish("interpreter-exit")


def _wake(control: str) -> None:
    """Wakes the thread waiting on the control FIFO (it then sees why)."""
    with contextlib.suppress(OSError):
        fd = os.open(control, os.O_WRONLY | os.O_NONBLOCK)
        try:
            os.write(fd, b"wake")
        finally:
            os.close(fd)


def _metadata(request: dict[str, Any], census: dict[str, Any] | None) -> str:
    attached: dict[str, Any] = {
        "time_ns": time.time_ns(),
        "route": request["route"],
        "duration": request["duration"],
    }
    if census is not None:
        attached["census"] = census
    return capture_metadata(
        command="attach",
        argv=list(getattr(sys, "argv", [])),
        nframe=request["nframe"],
        min_size=request["min_size"],
        native_heap=request["native_heap"],
        launcher_files=None,
        native_stacks=request["native_stacks"],
        attached=attached,
    )


def attach(request: dict[str, Any]) -> None:
    """Starts recording as ``request`` says and writes the answer into ``result.json``
    (memtape's own work: neither is recorded)."""
    files = SessionFiles(request["directory"])
    token = _native._own_work_begin()
    try:
        write_json(files.result, _start(files, request))
    finally:
        _native._work_end(token)


def _start(files: SessionFiles, request: dict[str, Any]) -> dict[str, Any]:
    census = object_census.take() if request["census"] else None
    capture = AttachedCapture(files, request["duration"])
    thread = threading.Thread(target=capture.watch, name=THREAD_NAME, daemon=True)
    thread.start()
    if not capture.ready.wait(THREAD_START_S):
        capture.failed.set()
        return {"error": "memtape's thread did not start in the target"}
    try:
        _native._start_capture(
            request["output"],
            _metadata(request, census),
            request["min_size"],
            request["native_heap"],
            request["native_stacks"],
        )
        atexit.register(capture.finish_at_exit)
    except (RuntimeError, OSError, ValueError) as exc:
        capture.failed.set()
        _wake(files.control)
        return {"error": str(exc)}
    return {"recording": request["output"], "thread": capture.native_id, "census": census}
