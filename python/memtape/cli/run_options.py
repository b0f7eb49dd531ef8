"""Record a Python program into a capture file, running it exactly as python runs it:
'memtape run script.py args' does what 'python script.py args' does, also for a
directory or a zip file with a __main__.py, and so do -m module and -c code (the
program's sys.argv, sys.path[0], __main__, exceptions and exit status are python's).

memtape's options come first; the program ends them, and everything after it is the
program's own, passed on untouched ('memtape run script.py --help' asks the script for
its help). At the end a summary goes to stderr: the peak, the top sites at the peak and
the commands that read the capture."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from memtape._program import Program, split_program
from memtape.cli.command_parser import command_parser, whole_number
from memtape.cli.import_option import DEFAULT_IMPORTS, add_imports_option

# The options that start the program, as they do python's.
PROGRAM_OPTIONS = ("-m", "-c")


@dataclass(frozen=True)
class RunOptions:
    """What `memtape run` was asked to do."""

    output: str | None
    nframe: int
    min_size: int
    force: bool
    quiet: bool
    program: Program
    #: Record native (C, C++, Rust) malloc/mmap calls too (off: ``--no-native-heap``).
    native_heap: bool = True
    #: Record every child Python process too, each into ``STEM.<pid>.mtape``.
    follow_children: bool = False
    #: Record each allocation's native stack too: the C functions between the Python
    #: line and the allocation (``--native``).
    native_stacks: bool = False
    #: How the end summary shows import machinery (``--imports``).
    imports: str = DEFAULT_IMPORTS
    #: Show the live view while the program runs (``--live``).
    live: bool = False


def add_recording_options(p: argparse.ArgumentParser) -> None:
    """What to record, as ``memtape run`` and ``memtape attach`` take it: ``--nframe``,
    ``--min-size``, ``--native``, ``--no-native-heap``."""
    p.add_argument(
        "-n",
        "--nframe",
        type=whole_number(1, 65535),
        default=64,
        metavar="N",
        help="frames kept per traceback, innermost first, 1 to 65535 (default: 64)",
    )
    p.add_argument(
        "--min-size",
        type=whole_number(0),
        default=0,
        metavar="BYTES",
        help="record only the allocations of at least BYTES bytes (default: 0, all)",
    )
    p.add_argument(
        "--native",
        dest="native_stacks",
        action="store_true",
        help="record each allocation's native stack too: the C, C++ or Rust functions "
        "between the Python line and the allocation (default: Python frames only)",
    )
    p.add_argument(
        "--no-native-heap",
        dest="native_heap",
        action="store_false",
        help="record the Python heap only, not native (C, C++, Rust) malloc and mmap calls "
        "(default: both)",
    )


def run_parser() -> argparse.ArgumentParser:
    """memtape's options of ``memtape run``, and the program's forms (for the help)."""
    p = command_parser("run", __doc__ or "")
    p.usage = "%(prog)s [options] (script.py | dir | app.zip | -m module | -c code) [args ...]"
    # A prefix of an option would not end where the program starts (see program_start).
    p.allow_abbrev = False
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="the capture file to write (default: memtape-NAME-PID.mtape in the current "
        "directory; NAME is the script's or module's name, or 'code' for -c)",
    )
    add_recording_options(p)
    p.add_argument(
        "--follow-children",
        action="store_true",
        help="record every child Python process too, each into STEM.<pid>.mtape beside "
        "the capture STEM.mtape (default: this process only)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="overwrite the capture file if it exists (default: refuse)",
    )
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="print no summary at the end, and analyze nothing while the program runs "
        "(default: the summary)",
    )
    p.add_argument(
        "--live",
        action="store_true",
        help="show a live view in the terminal while the program runs: memory now, over "
        "time and the top sites, drawn again each second. The program runs in a child "
        "process whose output (stdout and stderr) goes to FILE.out beside the capture; q "
        "stops it as Ctrl-C would, and the capture ends complete (default: no view)",
    )
    add_imports_option(p)
    program = p.add_argument_group("the program (the first argument that is not an option)")
    program.add_argument(
        "script",
        nargs="?",
        metavar="script.py",
        help="a script, or a directory or zip file with a __main__.py, as python runs it",
    )
    program.add_argument("-m", metavar="module", help="a module, as 'python -m module' runs it")
    program.add_argument("-c", metavar="code", help="code, as 'python -c code' runs it")
    program.add_argument(
        "args", nargs="*", help="the program's own arguments, options too, passed on untouched"
    )
    return p


def program_start(parser: argparse.ArgumentParser, argv: list[str]) -> int | None:
    """Where the program starts in ``argv``: the first argument that is neither one of
    memtape's options nor an option's value (``-m``, ``-c`` and ``--`` start it, as in
    python), or None when there is none."""
    takes_value = {
        flag
        for action in parser._actions  # argparse keeps no public list of its options
        if action.nargs != 0
        for flag in action.option_strings
    }
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in PROGRAM_OPTIONS or arg in ("--", "-") or not arg.startswith("-"):
            return i
        i += 1
        if arg.startswith("--"):
            i += arg in takes_value  # --output=FILE is one argument
            continue
        # Short options, possibly bundled: -q, -oFILE, -qo FILE.
        for k in range(1, len(arg)):
            if f"-{arg[k]}" in takes_value:
                i += k == len(arg) - 1
                break
    return None


def parse_run_args(argv: list[str]) -> RunOptions:
    """memtape's options, then the program and its arguments; a mistake exits with the
    usage and status 2."""
    parser = run_parser()
    start = program_start(parser, argv)
    ours = argv if start is None else argv[:start]
    args = parser.parse_args(ours)  # --help, --version and bad values end here
    if start is None:
        parser.error("nothing to run: give a script, a directory, a zip file, -m module or -c code")
    if argv[start] == "--":
        start += 1
        if start == len(argv):
            parser.error("nothing to run after --")
    program = split_program(argv, start)
    if program is None:
        parser.error(f"argument {argv[start]}: expected one argument")
    if args.native_stacks and not args.native_heap:
        parser.error(
            "--native records native stacks of native allocations too: "
            "it cannot go with --no-native-heap"
        )
    return RunOptions(
        args.output,
        args.nframe,
        args.min_size,
        args.force,
        args.quiet,
        program,
        args.native_heap,
        args.follow_children,
        args.native_stacks,
        args.imports,
        args.live,
    )
