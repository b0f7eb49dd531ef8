"""Record a running CPython process (3.11 to 3.15) without restarting it, into a capture
file every reading command reads. Recording starts inside the target at its next safe
point: through PEP 768 (sys.remote_exec) on 3.14+ when memtape runs on the target's own
Python version, through gdb otherwise (the target is stopped for a fraction of a
second). It runs until 'memtape detach PID', until --duration has passed (then this
command waits for it), or until the target exits; the capture's trailer says which.

Only what is allocated after the attach has a traceback: every report says so. At the
attach memtape counts the target's live Python objects by type (memtape stats shows
that census), so what was allocated before has an answer too.

Attaching needs the rights to trace the target: its user, or root (CAP_SYS_PTRACE);
Yama's /proc/sys/kernel/yama/ptrace_scope may restrict more. The target's Python needs a
memtape build of its version: the one beside this memtape, or one in a directory named
by MEMTAPE_BUILDS."""

from __future__ import annotations

import argparse
import os
import sys

from memtape.attach.control import (
    Attachment,
    AttachOptions,
    start_recording,
    stop_recording,
    wait_until_ended,
)
from memtape.attach.target_process import AttachError
from memtape.cli.attach_note import describe_census
from memtape.cli.capture_file import refuse_overwrite
from memtape.cli.command_parser import command_parser
from memtape.cli.live import live_view_problem
from memtape.cli.run_options import add_recording_options
from memtape.cli.summary import print_read_hints


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise ValueError(text)
    return value


_seconds.__name__ = "seconds"  # argparse names the type in its error message


def _program_name(pid: int) -> str:
    """The target's script or module name, for the default file name."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        for i, arg in enumerate(args[1:], 1):
            if arg == "-m" and i + 1 < len(args):
                return args[i + 1].rsplit(".", 1)[-1]
            if arg == "-c":
                return "code"
            if not arg.startswith("-"):
                return os.path.splitext(os.path.basename(arg))[0] or "python"
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip() or "python"
    except OSError:
        return "python"


def parser() -> argparse.ArgumentParser:
    p = command_parser("attach", __doc__ or "")
    p.add_argument("pid", type=int, help="the process to record")
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="the capture file to write (default: memtape-NAME-PID.mtape in the current "
        "directory); the target writes it, so its user must be able to",
    )
    add_recording_options(p)
    p.add_argument(
        "--duration",
        type=_seconds,
        metavar="SECONDS",
        help="stop recording after SECONDS; this command waits until then (Ctrl-C "
        "detaches early) (default: record until memtape detach PID or the target exits)",
    )
    p.add_argument(
        "--no-census",
        dest="census",
        action="store_false",
        help="skip the count of live objects by type taken at the attach (it holds the "
        "target for as long as it takes: about a second per few million objects)",
    )
    p.add_argument(
        "--timeout",
        type=_seconds,
        default=10.0,
        metavar="SECONDS",
        help="how long to wait for the target to start recording; it starts at the "
        "target's next safe point (default: 10)",
    )
    p.add_argument(
        "--live",
        action="store_true",
        help="show the recording in a live terminal view (as memtape live FILE); q detaches "
        "and the process goes on running",
    )
    p.add_argument("--force", action="store_true", help="overwrite the capture file if it exists")
    return p


def _fail(message: str) -> int:
    print(f"memtape attach: {message}", file=sys.stderr)
    return 2


def main(argv: list[str]) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.native_stacks and not args.native_heap:
        p.error(
            "--native records native stacks of native allocations: "
            "it cannot go with --no-native-heap"
        )
    shown = args.output or f"memtape-{_program_name(args.pid)}-{args.pid}.mtape"
    refuse_overwrite("attach", shown, args.force)
    if args.live:
        # Before the target is touched: a view that cannot be shown attaches nothing.
        problem = live_view_problem()
        if problem is not None:
            return _fail(problem)
    options = AttachOptions(
        output=os.path.abspath(shown),
        nframe=args.nframe,
        min_size=args.min_size,
        native_heap=args.native_heap,
        native_stacks=args.native_stacks,
        duration=args.duration,
        census=args.census,
        wait_s=args.timeout,
    )
    try:
        attachment = start_recording(args.pid, options)
    except AttachError as refusal:
        return _fail(str(refusal))
    except KeyboardInterrupt:
        # start_recording cancelled the attach, or stopped what had just started.
        print(f"memtape attach: interrupted; process {args.pid} is not recorded", file=sys.stderr)
        return 130
    try:
        _print_started(attachment, shown)
        if args.live:
            return _watch_live(attachment, shown)
        if args.duration is None:
            print(f"stop it with: memtape detach {args.pid}", file=sys.stderr)
            return 0
    except KeyboardInterrupt:
        # Recording runs: a Ctrl-C from here on detaches, as during --duration.
        return _detach_now(attachment, shown)
    return _wait(attachment, shown, args.duration)


def _detach_now(attachment: Attachment, shown: str) -> int:
    """Stops the recording now (a Ctrl-C): the capture complete, memtape gone."""
    try:
        ending = stop_recording(attachment.target.pid)
    except AttachError as refusal:
        return _fail(str(refusal))
    print_ended(ending.exit, ending.events, shown)
    return 0


def _print_started(attachment: Attachment, shown: str) -> None:
    target = attachment.target
    how = {
        "remote_exec": "PEP 768",
        "gdb": "gdb",
        "gdb-blocked-thread": "gdb, in its main thread blocked in a system call",
    }[attachment.route]
    print(
        f"memtape attach: recording process {target.pid} (CPython {target.version_text}, "
        f"through {how}) into {shown}",
        file=sys.stderr,
    )
    if attachment.census is not None:
        lines = describe_census(attachment.census, limit=5)
        print(f"alive before the attach: {lines[0]}", file=sys.stderr)
        for line in lines[1:]:
            print(line, file=sys.stderr)


def _watch_live(attachment: Attachment, shown: str) -> int:
    """The live view of the recording until the user quits, then the detach (unless the
    recording ended by itself meanwhile: --duration, or the target exited)."""
    from memtape.live_view import show_live_view

    pid = attachment.target.pid
    note = f"attached to process {pid}: memory allocated before the attach is not attributed"
    show_live_view(attachment.output, pid, quit_note="detaches", note=note)
    try:
        ending = wait_until_ended(attachment, 0.1) or stop_recording(pid)
    except AttachError as refusal:
        return _fail(str(refusal))
    print_ended(ending.exit, ending.events, shown)
    return 0


def _wait(attachment: Attachment, shown: str, duration: float) -> int:
    pid = attachment.target.pid
    try:
        ending = wait_until_ended(attachment, duration + 30.0)
    except KeyboardInterrupt:
        return _detach_now(attachment, shown)
    except AttachError as refusal:
        return _fail(str(refusal))
    if ending is None:
        return _fail(f"process {pid} did not end its capture {duration:g} s after the attach")
    print_ended(ending.exit, ending.events, shown)
    return 0


def print_ended(exit: str, events: int | None, shown: str) -> None:
    why = {
        "duration": "the duration has passed",
        "detached": "detached",
        "interpreter-exit": "the process exited",
        "killed": "the process was killed: the capture is cut short",
    }.get(exit, exit)
    counted = "" if events is None else f", {events:,} events"
    print(f"memtape: capture complete ({why}{counted}): {shown}", file=sys.stderr)
    print_read_hints(shown)
