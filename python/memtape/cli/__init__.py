"""The ``memtape`` command: record a program, then read the recording.

    memtape run [-o FILE] [--nframe N] [--min-size BYTES] [--follow-children] script.py [args]
    memtape stats FILE                  totals, peak and when, top sites
    memtape top FILE [--by lineno|filename|traceback] [--limit N]
    memtape diff FILE_A [FILE_B]        what grew (tracemalloc's compare_to)
    memtape flamegraph FILE -o out.html [--leaks]
    memtape report FILE -o report.html  one offline page
    memtape export FILE --format torch|tracemalloc|json|csv -o OUT

With ``--follow-children`` each child Python records ``FILE.<pid>.mtape`` beside FILE;
every reading command then reads them all (combined), or one with ``--pid PID``.

Every reading command exits with status 2, naming the file and the byte offset, when a
file is truncated in its header, corrupt or not a capture.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from typing import NoReturn

COMMANDS = {
    "run": "memtape.cli.run",
    "stats": "memtape.cli.stats",
    "top": "memtape.cli.top",
    "diff": "memtape.cli.diff",
    "flamegraph": "memtape.cli.flamegraph",
    "report": "memtape.cli.report",
    "export": "memtape.cli.export",
}

USAGE = """usage: memtape COMMAND [options]

commands:
  run         record a Python program into a capture file
  stats       totals, the peak and when it happened, top allocation sites
  top         top allocation sites by line, file or traceback
  diff        what grew between two captures (or two moments of one)
  flamegraph  memory live at the peak (or never freed) as a flame graph
  report      one self-contained HTML page: timeline, flame graph, top sites
  export      the recording as a memory_viz pickle, a tracemalloc snapshot, or JSON

run `memtape COMMAND --help` for a command's options"""


def main(argv: list[str] | None = None) -> NoReturn:
    """Entry point of the ``memtape`` command."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        sys.exit(0 if args else 2)
    if args[0] in ("-V", "--version"):
        from memtape import __version__

        print(f"memtape {__version__}")
        sys.exit(0)
    module = COMMANDS.get(args[0])
    if module is None:
        print(f"{USAGE}\n\nmemtape: unknown command {args[0]!r}", file=sys.stderr)
        sys.exit(2)
    command = importlib.import_module(module)
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
