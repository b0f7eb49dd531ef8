"""The ``memtape`` command: record a program, then read the recording.

Each command is a module of this package with a ``main(argv) -> int``; only the one
asked for is imported (``memtape run`` imports as little as it can before the program
starts). ``memtape --help`` lists them, ``memtape COMMAND --help`` gives a command's
options; a usage mistake exits with status 2, as does a file that is truncated in its
header, corrupt or not a capture (naming the file and the byte offset).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from typing import NoReturn

from memtape.cli.command_parser import HelpFormatter, add_version

# The commands: the module that runs each, and its line in `memtape --help`.
COMMANDS = {
    "run": ("memtape.cli.run", "record a Python program into a capture file"),
    "attach": ("memtape.cli.attach", "record a running Python process (until memtape detach)"),
    "detach": ("memtape.cli.detach", "stop recording a process memtape attach records"),
    "live": ("memtape.cli.live", "follow a capture being written, in a live terminal view"),
    "stats": ("memtape.cli.stats", "totals, the peak and when it happened, top allocation sites"),
    "top": ("memtape.cli.top", "top allocation sites by line, file or traceback"),
    "diff": ("memtape.cli.diff", "what grew between two captures (or two moments of one)"),
    "flamegraph": (
        "memtape.cli.flamegraph",
        "memory live at the peak (or never freed) as a flame graph",
    ),
    "report": (
        "memtape.cli.report",
        "one self-contained HTML page: timeline, flame graph, top sites",
    ),
    "export": (
        "memtape.cli.export",
        "the recording as a memory_viz pickle, a tracemalloc snapshot, JSON or CSV",
    ),
}

DESCRIPTION = """\
Record every allocation and free of a Python program (the Python heap, native code,
array frameworks) with the traceback that made it, then read the recording: the peak
and when it happened, the lines that own the memory, what grew, what was never freed."""

EPILOG = """\
With 'memtape run --follow-children', each child Python records FILE.<pid>.mtape beside
FILE; every reading command then reads them all (combined), or one with --pid PID.

Every reading command exits with status 2, naming the file and the byte offset, when a
file is truncated in its header, corrupt or not a capture.

Run 'memtape COMMAND --help' for a command's options."""


def top_parser() -> argparse.ArgumentParser:
    """``memtape``'s own parser: the commands and ``--version`` (a command's options are
    its module's)."""
    parser = argparse.ArgumentParser(
        prog="memtape",
        usage="%(prog)s [-h] [-V] COMMAND [options]",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    add_version(parser)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    for name, (_, summary) in COMMANDS.items():
        commands.add_parser(name, help=summary, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> NoReturn:
    """Entry point of the ``memtape`` command."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0].startswith("-"):
        # memtape's own options (--help, --version) or none: argparse answers and exits.
        parser = top_parser()
        parser.parse_args(args)
        parser.print_help(sys.stderr)
        sys.exit(2)
    entry = COMMANDS.get(args[0])
    if entry is None:
        top_parser().error(f"unknown command {args[0]!r} (choose from {', '.join(COMMANDS)})")
    command = importlib.import_module(entry[0])
    try:
        status = command.main(args[1:])
        with contextlib.suppress(ValueError):  # a program run by `memtape run` closed it
            sys.stdout.flush()
    except BrokenPipeError:
        # Output piped into `head` and the like: stop quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        status = 0
    sys.exit(status)
