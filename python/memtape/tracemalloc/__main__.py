"""``python -m memtape.tracemalloc [options] (script.py | -m module | -c code) [args]``

Runs a program with memtape's tracemalloc started before the program's first line, exactly
as ``python`` would run it (``sys.argv``, ``__main__``, exit status and exceptions are the
program's own), then prints the allocation sites still holding the most memory when it
ends (to stderr, so the program's own output stays clean).

memtape is the process's tracer (see :func:`memtape.tracemalloc.install`), and
``MEMTAPE_TRACEMALLOC`` is set to the frame limit so that child processes trace too, as
they would under ``python -X tracemalloc``.
"""

from __future__ import annotations

import os
import sys
from typing import NamedTuple, NoReturn

from memtape import _native, tracemalloc
from memtape._process_tracer import ENV_VAR
from memtape._program import Program, prepare, program_launcher_files, run, split_program

USAGE = (
    "usage: python -m memtape.tracemalloc [-n NFRAME] [--top N] "
    "(script.py | -m module | -c code) [args ...]"
)


class Invocation(NamedTuple):
    """Options and the program to run."""

    nframe: int
    top: int
    program: Program


def _usage_error(message: str) -> NoReturn:
    print(f"{USAGE}\npython -m memtape.tracemalloc: error: {message}", file=sys.stderr)
    sys.exit(2)


def parse_args(argv: list[str]) -> Invocation:
    """Options come first; ``-m``/``-c``/the script end them, the rest is the program's."""
    nframe, top = 1, 10
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-h", "--help"):
            print(USAGE)
            sys.exit(0)
        if arg in ("-n", "--nframe", "--top"):
            if i + 1 >= len(argv):
                _usage_error(f"{arg} needs a value")
            try:
                value = int(argv[i + 1])
            except ValueError:
                _usage_error(f"{arg} takes a whole number, not {argv[i + 1]!r}")
            if arg == "--top":
                top = value
            else:
                nframe = value
            i += 2
            continue
        program = split_program(argv, i)
        if program is None:
            _usage_error(f"unknown option or missing value: {arg}")
        return Invocation(nframe, top, program)
    _usage_error("nothing to run: give a script, -m module or -c code")


def _report(top: int) -> None:
    if top <= 0 or not tracemalloc.is_tracing():
        return
    snapshot = tracemalloc.take_snapshot()
    current, peak = tracemalloc.get_traced_memory()
    err = sys.stderr
    print(
        f"\nmemtape: traced memory at exit {tracemalloc._format_size(current, False)}, "
        f"peak {tracemalloc._format_size(peak, False)}; top {top} allocation sites "
        "still holding memory:",
        file=err,
    )
    for index, stat in enumerate(snapshot.statistics("lineno")[:top], 1):
        print(f"#{index:<3d} {stat}", file=err)


def main(argv: list[str] | None = None) -> NoReturn:
    inv = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        tracemalloc.start(inv.nframe)
    except (ValueError, OverflowError) as exc:
        _usage_error(f"--nframe: {exc}")
    # memtape's work from here on is not the program's, nor is what runpy does to load it
    # (python itself loads a script in C, with no frame to trace it to): run() hands the
    # thread to the program from its first frame on. The program's globals stay alive
    # for the report, as they do in python until the interpreter exits.
    token = _native._own_work_begin()
    kept: list[dict[str, object]] = []
    try:
        tracemalloc.install()
        os.environ[ENV_VAR] = str(inv.nframe)
        # Tracebacks start at the program's first frame, as under python -X tracemalloc.
        _native._hide_launcher_frames(program_launcher_files())
        prepare(inv.program)
        run(inv.program, kept)
    finally:
        _report(inv.top)
        _native._work_end(token)
        kept.clear()
    sys.exit(0)


if __name__ == "__main__":
    main()
