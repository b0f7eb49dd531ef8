"""``memtape run``: record a program into a capture file, exactly as ``python`` runs it."""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import pkgutil  # noqa: F401 - runpy.run_path imports it: loaded before the capture starts
import signal
import sys
import threading
import traceback
import uuid
from types import TracebackType

from memtape import _child_capture, _mlx, _native
from memtape._child_capture import FollowPlan
from memtape._program import Program, prepare, program_launcher_files, run
from memtape.capture_metadata import capture_metadata
from memtape.cli.capture_file import refuse_overwrite
from memtape.cli.run_end import CaptureEnd, ExitHooks, die_by_signal
from memtape.cli.run_options import RunOptions, parse_run_args
from memtape.cli.summary_process import start_follower


def default_output(program: Program) -> str:
    """``memtape-<name>-<pid>.mtape`` in the current directory."""
    return f"memtape-{program.name}-{os.getpid()}.mtape"


#: The import system's files: below the program's own frames where ``-m pkg.mod``'s
#: packages run their ``__init__`` (runpy imports them before the program starts).
IMPORT_SYSTEM_FILES = ["<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>"]


def launcher_files(launcher: str) -> list[str]:
    """Files whose frames sit below the program's own in every recorded stack: memtape's
    package and runpy, the import system and the command that started memtape. Reports
    leave them out at the outer end of each stack (an import inside the program keeps
    its import frames: the program's own frame is below them)."""
    return [*program_launcher_files(), *IMPORT_SYSTEM_FILES, launcher]


def metadata(opts: RunOptions, launcher: str, plan: FollowPlan | None = None) -> str:
    """The capture header's metadata (with the run's id when children are followed)."""
    followed = {} if plan is None else {"run_id": plan.run_id, "root_pid": plan.root_pid}
    return capture_metadata(
        command=opts.program.kind,
        argv=opts.program.argv,
        nframe=opts.nframe,
        min_size=opts.min_size,
        native_heap=opts.native_heap,
        launcher_files=launcher_files(launcher),
        follow_children=opts.follow_children,
        native_stacks=opts.native_stacks,
        **followed,
    )


def _strip_our_frames(tb: TracebackType | None) -> TracebackType | None:
    """The traceback from the program's first frame on (drops memtape's and runpy's)."""
    package, *ours = program_launcher_files()
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not (filename.startswith(package) or filename in ours):
            return tb
        tb = tb.tb_next
    return None


def _join_non_daemon_threads() -> None:
    """Waits for the program's non-daemon threads, as python does before exiting, so
    that what they allocate is recorded."""
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and not thread.daemon and thread.is_alive():
            thread.join()


def _run_atexit_handlers() -> None:
    """Runs the program's atexit handlers while the capture records, in python's order
    (after the non-daemon threads). An exception in one is reported and ignored, as
    python does; a handler calling ``os._exit`` ends the capture through the wrapper. They
    are the program's code: recorded like the program (memtape's own work around them is
    not)."""
    _native._call_as_program(atexit._run_exitfuncs)


def main(argv: list[str]) -> int:
    opts = parse_run_args(argv)
    # The option parser is garbage held in reference cycles: collected now, before the
    # capture starts, its frees are not counted as the program's (of blocks unseen).
    gc.collect()
    missing = opts.program.missing_script()
    if missing is not None:
        print(f"memtape run: {missing}", file=sys.stderr)
        return 2
    no_main = opts.program.missing_main()
    if no_main is not None:
        print(f"memtape run: {no_main}", file=sys.stderr)
        return 1
    shown = opts.output or default_output(opts.program)
    path = os.path.abspath(shown)  # the program may change directory
    refuse_overwrite("run", shown, opts.force)
    if opts.live:
        try:
            from memtape.cli.run_live import run_live
        except ImportError as exc:  # a Python built without ncurses
            print(
                "memtape run: the live view needs Python's curses module, which this Python "
                f"lacks ({exc})",
                file=sys.stderr,
            )
            return 2
        return run_live(argv, shown, opts.force)
    launcher = os.path.abspath(sys.argv[0])  # before prepare() replaces sys.argv
    prepare(opts.program)
    # memtape's own work on this thread stays out of the capture; run() hands the thread
    # back to the program while it runs.
    token = _native._own_work_begin()
    try:
        return _record(opts, shown, path, launcher)
    finally:
        _native._work_end(token)


def _follow_plan(opts: RunOptions, path: str) -> FollowPlan | None:
    if not opts.follow_children:
        return None
    return FollowPlan(
        stem=_child_capture.stem_of(path),
        run_id=uuid.uuid4().hex,
        root_pid=os.getpid(),
        nframe=opts.nframe,
        min_size=opts.min_size,
        native_heap=opts.native_heap,
    )


def _record(opts: RunOptions, shown: str, path: str, launcher: str) -> int:
    """Records the program into ``path`` and prints the summary; the exit status."""
    # A followed child that is itself `memtape run` records into its own file only.
    _child_capture.abandon()
    plan = _follow_plan(opts, path)
    # The summary's analysis reads the file as it is written, in a process of its own
    # (started before the capture, so that starting it is not traced).
    follower = None if opts.quiet else start_follower(opts.imports)
    try:
        _native._start_capture(
            path,
            metadata(opts, launcher, plan),
            opts.min_size,
            opts.native_heap,
            opts.native_stacks,
        )
    except OSError as exc:
        print(f"memtape run: {exc}", file=sys.stderr)
        return 2
    if follower is not None:
        try:
            follower.follow(path)
        except (OSError, RuntimeError):
            follower = None  # the summary reads the file at the end instead
    _mlx.follow("capture", True)
    pid = os.getpid()
    end = CaptureEnd(shown, path, opts.quiet, follower, opts.imports)
    hooks = ExitHooks(end)
    hooks.install()
    if plan is not None:
        _child_capture.follow(plan)
    exit_kind, code = "normal", 0
    failure: BaseException | None = None
    # The program's globals stay alive until the capture ends, as in `python`, so that
    # what they hold counts as live at the end (not freed by memtape's own shutdown).
    globals_kept: list[dict[str, object]] = []
    try:
        run(opts.program, globals_kept)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except KeyboardInterrupt as exc:
        exit_kind, code, failure = "signal", 130, exc
    except BaseException as exc:  # noqa: BLE001 - the program's own exception, reported as python would
        exit_kind, code, failure = "exception", 1, exc
    if os.getpid() != pid:
        # A forked child leaving through the end of the program: the capture is the
        # parent's; leave as the child would have.
        return code
    if failure is not None:
        traceback.print_exception(
            type(failure), failure, _strip_our_frames(failure.__traceback__), file=sys.stderr
        )
    if not isinstance(failure, KeyboardInterrupt):
        _join_non_daemon_threads()
    _run_atexit_handlers()
    end.finish(exit_kind, code)
    hooks.remove()
    globals_kept.clear()
    with contextlib.suppress(OSError, ValueError):  # the program may have closed stdout
        sys.stdout.flush()
    if isinstance(failure, KeyboardInterrupt) or end.summary_interrupted:
        # As python ends after an uncaught KeyboardInterrupt.
        die_by_signal(signal.SIGINT)
    return code
