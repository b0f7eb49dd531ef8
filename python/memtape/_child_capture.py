"""Following child processes (``memtape run --follow-children``): every Python process
the program starts records its own capture beside the parent's.

Two ways in, one for each way a child Python starts:

- **A new interpreter** (``subprocess`` running python, multiprocessing's ``spawn``
  workers, the ``forkserver`` server and the resource tracker): ``memtape run`` puts
  :data:`ENV_VAR` in the environment, which children inherit; the installed
  ``memtape_startup.pth`` imports this module from ``site`` when it is set, before any of
  the child's code runs, and the capture starts there. ``-E`` and ``-I`` children are
  followed too (the variable is memtape's, not one of python's); ``-S`` children (no
  ``site``) and interpreters without memtape installed are not.
- **A fork** (multiprocessing's ``fork`` workers, the workers the forkserver forks,
  ``os.fork``): an ``os.register_at_fork`` child handler starts a fresh capture. The
  parent's capture is untouched (the native fork handlers make the child forget it). The
  child's capture records what the child does after the fork: what it inherited is the
  parent's memory (shared, copy-on-write), counted once, in the parent.

A child's capture is ``STEM.<pid>.mtape`` beside the parent's ``STEM.mtape``; its
metadata names the run (``run_id``, shared by the whole tree), its parent's pid and how
it started, so reports find the set by name and check it by run id. A child ends its
capture on every way out ``memtape run`` handles (``os._exit``, SIGTERM and SIGHUP when
unhandled, interpreter exit), quietly: its output stays the program's own. Nothing here
may change what the child does: any failure is one line on stderr, and the child runs on
unrecorded.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memtape.cli.run_end import CaptureEnd, ExitHooks

ENV_VAR = "MEMTAPE_FOLLOW_CHILDREN"
SUFFIX = ".mtape"


@dataclass(frozen=True)
class FollowPlan:
    """What every process of a followed run needs to record itself (from the root)."""

    #: The root capture's path without ``.mtape``: children write ``STEM.<pid>.mtape``.
    stem: str
    run_id: str
    root_pid: int
    nframe: int
    min_size: int
    native_heap: bool

    def to_env(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_env(cls, text: str) -> FollowPlan:
        data = json.loads(text)
        return cls(
            stem=str(data["stem"]),
            run_id=str(data["run_id"]),
            root_pid=int(data["root_pid"]),
            nframe=int(data["nframe"]),
            min_size=int(data["min_size"]),
            native_heap=bool(data["native_heap"]),
        )


def stem_of(path: str) -> str:
    """``out.mtape`` -> ``out``; a name without the suffix is its own stem."""
    return path[: -len(SUFFIX)] if path.endswith(SUFFIX) else path


def child_path(stem: str, pid: int) -> str:
    return f"{stem}.{pid}{SUFFIX}"


class _Following:
    """This process's part in a followed run."""

    #: The run's plan, once following is on here.
    plan: FollowPlan | None = None
    #: How this process started ("root", "spawn", "fork", ...).
    start_method = "root"
    #: The capture this module started in this process (its path), if any.
    recording: str | None = None
    #: Its end and exit hooks.
    end: CaptureEnd | None = None
    hooks: ExitHooks | None = None


_here = _Following()


def _warn(message: str) -> None:
    with contextlib.suppress(Exception):  # stderr closed: stay silent rather than fail
        print(f"memtape: {message}", file=sys.stderr)


def _exec_start_method() -> str:
    """How this new interpreter was started, from its command line."""
    argv = list(getattr(sys, "orig_argv", sys.argv))
    if "--multiprocessing-fork" in argv:
        return "spawn"
    text = " ".join(argv)
    if "multiprocessing.forkserver" in text:
        return "forkserver-server"
    if "multiprocessing.resource_tracker" in text:
        return "resource-tracker"
    return "subprocess"


def _metadata(plan: FollowPlan, start_method: str, parent_pid: int) -> str:
    from memtape._program import program_launcher_files
    from memtape.capture_metadata import capture_metadata

    return capture_metadata(
        command="child",
        argv=list(sys.argv),
        nframe=plan.nframe,
        min_size=plan.min_size,
        native_heap=plan.native_heap,
        launcher_files=program_launcher_files(),
        run_id=plan.run_id,
        root_pid=plan.root_pid,
        parent_pid=parent_pid,
        start_method=start_method,
    )


def _start(plan: FollowPlan, start_method: str, parent_pid: int) -> None:
    """Starts this process's capture and its exit hooks; warns and returns on failure."""
    from memtape import _native
    from memtape.cli.run_end import CaptureEnd, ExitHooks

    path = child_path(plan.stem, os.getpid())
    try:
        _native._start_capture(
            path, _metadata(plan, start_method, parent_pid), plan.min_size, plan.native_heap
        )
    except (OSError, RuntimeError, ValueError) as exc:
        _warn(f"not recording child process {os.getpid()}: {exc}")
        return
    _here.recording = path
    token = _native._own_work_begin()
    try:
        end = CaptureEnd(path, path, quiet=True)
        hooks = ExitHooks(end)
        hooks.install()
        _here.end, _here.hooks = end, hooks
        # Registered first in a new interpreter, so it runs after the program's handlers.
        atexit.register(end.finish, "interpreter-exit", 0)
    finally:
        _native._work_end(token)


def _on_fork() -> None:
    """``os.register_at_fork(after_in_child=...)``: the forked child records itself."""
    plan = _here.plan
    if plan is None:
        return
    _here.recording, _here.end, _here.hooks = None, None, None
    parent_role = _here.start_method
    _here.start_method = "forkserver" if parent_role == "forkserver-server" else "fork"
    try:
        _start(plan, _here.start_method, os.getppid())
    except Exception as exc:  # noqa: BLE001 - the child must run on whatever happens
        _warn(f"not recording child process {os.getpid()}: {exc}")


def follow(plan: FollowPlan, start_method: str = "root") -> None:
    """Follows this process's children from now on (the root calls it once its own
    capture runs; a followed child calls it at start-up)."""
    first = _here.plan is None
    _here.plan, _here.start_method = plan, start_method
    os.environ[ENV_VAR] = plan.to_env()
    if first:
        os.register_at_fork(after_in_child=_on_fork)


def recording() -> str | None:
    """The capture this module started in this process, if it runs."""
    return _here.recording


def abandon() -> None:
    """Stops and removes this process's child capture (a child that is itself
    ``memtape run`` records into its own file instead)."""
    path = _here.recording
    if path is None:
        return
    _here.recording = None
    from memtape import _native

    if _here.end is not None and _here.hooks is not None:
        _here.end.disown()
        _here.hooks.remove()
    try:
        _native._stop_capture("abandoned", 0)
        os.remove(path)
    except (OSError, RuntimeError):
        pass


def activate() -> None:
    """At interpreter start-up (from ``memtape_startup.pth``): record this new child.
    Idempotent (``site`` may read the same ``.pth`` twice in a virtual environment)."""
    text = os.environ.get(ENV_VAR, "")
    if not text or _here.plan is not None:
        return
    try:
        plan = FollowPlan.from_env(text)
    except (ValueError, KeyError, TypeError) as exc:
        _warn(f"ignoring {ENV_VAR}: {exc}")
        return
    if os.getpid() == plan.root_pid:
        return
    try:
        start_method = _exec_start_method()
        follow(plan, start_method)
        _start(plan, start_method, os.getppid())
    except Exception as exc:  # noqa: BLE001 - the child must run on whatever happens
        _warn(f"not recording child process {os.getpid()}: {exc}")
