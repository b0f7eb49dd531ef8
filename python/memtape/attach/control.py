"""Starting and stopping a recording in a running process, from outside it: what
``memtape attach`` and ``memtape detach`` do, for any command that needs it.

:func:`start_recording` checks the target (``target_process``: every refusal comes
before anything is written into it), writes the session's files (``session_files``),
has the target run the payload (``injection``) and waits, for a bounded time, for its
answer; :func:`stop_recording` asks the payload's thread to end the capture and waits
until it has, and until that thread is gone. Both raise :class:`AttachError` with a one-line
reason. The target is never left half-attached: a payload that runs after attach gave
up waiting finds the session cancelled and does nothing."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import time
from dataclasses import dataclass
from typing import Any

from memtape.attach import injection, target_process
from memtape.attach.bootstrap import payload_code
from memtape.attach.builds import build_for
from memtape.attach.session_files import SessionFiles, read_json, sessions_of, wait_for, write_json
from memtape.attach.target_process import AttachError, TargetProcess, is_alive

#: How long attach waits for the target to run the payload (it runs at the target's next
#: safe point: at once for a program running Python code).
ATTACH_WAIT_S = 10.0
#: How long attach waits for the main thread to reach a safe point before it looks
#: whether the thread is blocked in a call (then gdb runs the payload there).
BLOCKED_AFTER_S = 1.0
#: After this long without an answer, a session is taken for abandoned (its attach was
#: killed while it waited).
ABANDONED_AFTER_S = 120.0
#: How long detach waits for the capture to end and memtape's thread to go.
STOP_WAIT_S = 30.0


@dataclass(frozen=True)
class AttachOptions:
    """What to record (as ``memtape run``'s options of the same names)."""

    output: str
    nframe: int = 64
    min_size: int = 0
    native_heap: bool = True
    native_stacks: bool = False
    #: Seconds after which the target stops recording by itself (None: until detach).
    duration: float | None = None
    #: Count the live objects by type before recording starts.
    census: bool = True
    wait_s: float = ATTACH_WAIT_S


@dataclass(frozen=True)
class Attachment:
    """A recording running in another process."""

    target: TargetProcess
    files: SessionFiles
    output: str
    #: How the payload got in: ``remote_exec`` (PEP 768), ``gdb`` (a pending call) or
    #: ``gdb-blocked-thread`` (run by gdb in a main thread blocked in a system call).
    route: str
    census: dict[str, Any] | None


@dataclass(frozen=True)
class Ending:
    """How a recording in another process ended."""

    pid: int
    output: str | None
    #: ``detached``, ``duration`` or ``interpreter-exit``.
    exit: str
    events: int | None


def _clear_stale(pid: int, start_ticks: int) -> None:
    """Removes session directories of ``pid`` left by an earlier process with this pid,
    or by a session that has ended; AttachError when one is running."""
    for files in sessions_of(pid):
        current = files.directory == SessionFiles.of(pid, start_ticks).directory
        if current and not os.path.exists(files.ended):
            decision = files.decided()
            if decision == "started" and os.path.exists(files.control):
                request = read_json(files.request) or {}
                raise AttachError(
                    f"process {pid} is already being recorded by memtape attach into "
                    f"{request.get('output', '?')} (stop it with: memtape detach {pid})"
                )
            if decision is None and _younger_than(files.request, ABANDONED_AFTER_S):
                raise AttachError(f"memtape is attaching to process {pid} already")
        # Ended, cancelled (a payload still queued finds no request and does nothing)
        # or abandoned by an attach that was killed.
        files.remove()


def _younger_than(path: str, seconds: float) -> bool:
    try:
        return time.time() - os.stat(path).st_mtime < seconds
    except FileNotFoundError:
        return False


def _write_session(
    target: TargetProcess, package: str, route: str, options: AttachOptions
) -> SessionFiles:
    files = SessionFiles.of(target.pid, target.start_ticks)
    try:
        os.mkdir(files.directory, 0o700)
    except FileExistsError:
        raise AttachError(f"memtape is attaching to process {target.pid} already") from None
    try:
        os.mkfifo(files.control, 0o600)
        write_json(
            files.request,
            {
                "directory": files.directory,
                "package_parent": os.path.dirname(package),
                "route": route,
                "output": options.output,
                "nframe": options.nframe,
                "min_size": options.min_size,
                "native_heap": options.native_heap,
                "native_stacks": options.native_stacks,
                "duration": options.duration,
                "census": options.census,
            },
        )
        with open(files.script, "w", encoding="utf-8") as f:
            f.write(payload_code(package, files.request) + "\n")
        if target.uid != os.geteuid() or target.gid != os.getegid():
            # The target's user reads and writes the session (memtape runs as root here).
            for path in (files.directory, files.control, files.request, files.script):
                os.chown(path, target.uid, target.gid)
    except OSError as exc:
        files.remove()
        raise AttachError(f"cannot write the session files in {files.directory}: {exc}") from None
    return files


def _cancel(target: TargetProcess, files: SessionFiles, waited: float) -> None:
    """Gives up on a payload that has not answered: an AttachError, unless it started meanwhile."""
    if not is_alive(target.pid, target.start_ticks):
        files.remove()
        raise AttachError(f"process {target.pid} exited during the attach; nothing was recorded")
    if files.decide("cancelled"):
        # The payload may still run later: it finds the session cancelled and removes it.
        raise AttachError(
            f"process {target.pid} did not run memtape's payload within {waited:.0f} s (its "
            "main thread runs no Python code: blocked in a C call or waiting on a lock); "
            "nothing was changed in it"
        )


def _interrupted(target: TargetProcess, files: SessionFiles) -> None:
    """Ctrl-C while waiting for the payload: cancel it, or, when it has started already,
    stop the recording again; the target is left as it was either way."""
    if files.decide("cancelled") or not is_alive(target.pid, target.start_ticks):
        return
    if wait_for(
        files.result, STOP_WAIT_S, functools.partial(is_alive, target.pid, target.start_ticks)
    ):
        with contextlib.suppress(AttachError):
            stop_recording(target.pid)


def _wait_for_payload(
    target: TargetProcess, files: SessionFiles, package: str, wait_s: float
) -> tuple[dict[str, Any] | None, bool]:
    """The payload's answer within ``wait_s``, and whether it ran in a blocked main
    thread: when that thread has not reached a safe point after
    :data:`BLOCKED_AFTER_S`, and gdb is there, the payload runs in it directly if it is
    waiting in a blocking call (``injection.gdb_in_blocked_thread``)."""
    alive = functools.partial(is_alive, target.pid, target.start_ticks)
    started = time.monotonic()
    result = wait_for(files.result, min(BLOCKED_AFTER_S, wait_s), alive)
    if result is not None:
        return result, False
    blocked = False
    if alive() and shutil.which("gdb") is not None and files.decided() is None:
        code = payload_code(package, files.request)
        blocked = injection.gdb_in_blocked_thread(target, code)
    left = max(0.0, wait_s - (time.monotonic() - started))
    return wait_for(files.result, left, alive), blocked


def start_recording(pid: int, options: AttachOptions) -> Attachment:
    """Starts recording process ``pid`` into ``options.output``; AttachError with the reason
    when it cannot, the target then being as it was."""
    target = target_process.inspect(pid)
    _clear_stale(pid, target.start_ticks)
    recorded = target_process.open_captures(pid)
    if recorded:  # by memtape run, a notebook cell, the pytest plugin
        raise AttachError(f"process {pid} is already being recorded by memtape into {recorded[0]}")
    route = injection.route_for(target)
    package = build_for(target)
    files = _write_session(target, package, route, options)
    try:
        if route == "remote_exec":
            injection.remote_exec(target, files.script)
        else:
            injection.gdb(target, payload_code(package, files.request))
    except AttachError:
        files.remove()
        if not is_alive(pid, target.start_ticks):
            raise AttachError(f"process {pid} exited during the attach") from None
        raise
    alive = functools.partial(is_alive, pid, target.start_ticks)
    try:
        result, blocked = _wait_for_payload(target, files, package, options.wait_s)
    except KeyboardInterrupt:
        _interrupted(target, files)
        raise
    if result is None:
        _cancel(target, files, options.wait_s)
        # It started just as we gave up: its answer comes at once.
        result = wait_for(files.result, STOP_WAIT_S, alive)
        if result is None:
            files.remove()
            raise AttachError(f"process {pid} exited during the attach")
    if "error" in result:
        files.remove()
        raise AttachError(f"could not start recording in process {pid}: {result['error']}")
    if blocked:
        route = "gdb-blocked-thread"
    return Attachment(target, files, options.output, route, result.get("census"))


def _thread_gone(pid: int, thread: object, timeout_s: float) -> None:
    """Waits until memtape's thread has left the target (its task disappears)."""
    if not isinstance(thread, int):
        return
    deadline = time.monotonic() + timeout_s
    while os.path.exists(f"/proc/{pid}/task/{thread}") and time.monotonic() < deadline:
        time.sleep(0.01)


def _ending(
    pid: int, files: SessionFiles, request: dict[str, Any], ended: dict[str, Any]
) -> Ending:
    _thread_gone(pid, ended.get("thread"), STOP_WAIT_S)
    files.remove()
    if "error" in ended:
        raise AttachError(f"the capture in process {pid} did not end cleanly: {ended['error']}")
    return Ending(pid, request.get("output"), str(ended.get("exit")), ended.get("events"))


def wait_until_ended(attachment: Attachment, timeout_s: float | None = None) -> Ending | None:
    """Waits until the recording ends by itself (``--duration``, or the target exits);
    None after ``timeout_s``."""
    pid, files = attachment.target.pid, attachment.files
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while deadline is None or time.monotonic() < deadline:
        ended = read_json(files.ended)
        if ended is not None:
            return _ending(pid, files, read_json(files.request) or {}, ended)
        if not is_alive(pid, attachment.target.start_ticks):
            files.remove()
            return Ending(pid, attachment.output, "killed", None)
        time.sleep(0.05)
    return None


def _forget_exited(pid: int, gone: AttachError) -> None:
    """Removes what sessions of an exited process left; an AttachError saying where its
    capture is, when there was one."""
    outputs = []
    for files in sessions_of(pid):
        request = read_json(files.request) or {}
        if os.path.exists(files.ended) and request.get("output"):
            outputs.append(request["output"])
        files.remove()
    if outputs:
        raise AttachError(f"{gone}: it exited, and its capture ended with it: {outputs[0]}")


def stop_recording(pid: int) -> Ending:
    """Ends the recording memtape attach started in process ``pid`` and waits until
    memtape has left it; AttachError when there is none."""
    try:
        state, start_ticks = target_process.proc_state(pid)
    except AttachError as gone:
        _forget_exited(pid, gone)
        raise
    files = SessionFiles.of(pid, start_ticks)
    request = read_json(files.request)
    if request is None:
        for stale in sessions_of(pid):
            stale.remove()
        raise AttachError(f"process {pid} is not being recorded by memtape attach")
    ended = read_json(files.ended)
    if ended is None:
        if state in ("T", "t"):
            raise AttachError(
                f"process {pid} is stopped (state {state}): resume it first (kill -CONT {pid})"
            )
        target_process.check_rights(pid, os.stat(f"/proc/{pid}").st_uid)
        try:
            fd = os.open(files.control, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            # No reader: the payload's thread is not there (the start failed or is
            # still under way).
            if files.decided() is None:
                raise AttachError(f"memtape is still attaching to process {pid}") from None
            files.remove()
            raise AttachError(f"process {pid} is not being recorded by memtape attach") from None
        try:
            os.write(fd, b"stop")
        finally:
            os.close(fd)
        alive = functools.partial(is_alive, pid, start_ticks)
        ended = wait_for(files.ended, STOP_WAIT_S, alive)
        if ended is None:
            with contextlib.suppress(OSError):
                files.remove()
            if not alive():
                raise AttachError(f"process {pid} exited while memtape stopped recording it")
            raise AttachError(f"process {pid} did not end its capture within {STOP_WAIT_S:.0f} s")
    return _ending(pid, files, request, ended)
