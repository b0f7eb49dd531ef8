"""Follow a capture that another process is writing (memtape run -o FILE, in another
terminal) in a live view, drawn again about once a second: memory now and at the peak
by source (the Python heap, native code, frameworks), memory over time, and the top
allocation sites.

Keys: l live now, a allocated since the start, f live now by file, Tab the next of
these; up/down (j/k), PgUp/PgDn, Home/End scroll the sites; q quits the view, and the
recording goes on. When the recording ends, the view shows the end until q.

The view needs a terminal of at least 60 columns and 12 lines: otherwise it says so in
one line and exits with status 2, as for a file that is not a capture."""

from __future__ import annotations

import json
import os

from memtape import _native
from memtape.cli.capture_file import fail
from memtape.cli.command_parser import command_parser


def writer_pid(path: str) -> int | None:
    """The pid of the process that writes ``path`` (from its header), or None while the
    header is not written yet; exits with status 2 when the file is not a capture."""
    if not os.path.isfile(path):
        fail("live", f"{path}: no such file (start the recording first: memtape run -o FILE ...)")
    try:
        metadata = json.loads(_native.capture_metadata(path))
    except _native.CaptureFileError as exc:
        if os.path.getsize(path) == 0 or "truncated" in str(exc):
            return None  # the writer has not written the whole header yet
        fail("live", str(exc))
    except OSError as exc:
        fail("live", str(exc))
    pid = metadata.get("pid")
    return pid if isinstance(pid, int) else None


def live_view_problem() -> str | None:
    """Why the live view cannot be shown here (no curses in this Python, not a terminal,
    one too small), or None."""
    try:
        from memtape.live_view import terminal_problem
    except ImportError as exc:  # a Python built without ncurses
        return f"the live view needs Python's curses module, which this Python lacks ({exc})"
    return terminal_problem()


def main(argv: list[str]) -> int:
    p = command_parser("live", __doc__ or "")
    p.add_argument("file", help="a capture file being written by memtape run")
    args = p.parse_args(argv)
    pid = writer_pid(args.file)
    problem = live_view_problem()
    if problem is not None:
        fail("live", problem)
    from memtape.live_view import show_live_view

    show_live_view(args.file, pid, quit_note="the recording goes on")
    return 0
