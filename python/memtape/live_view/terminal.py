"""The live view in the terminal, through the standard library's curses: a refresh a
second, keys read between refreshes (see :mod:`memtape.live_view.view_state`)."""

from __future__ import annotations

import contextlib
import curses
import dataclasses
import json
import locale
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

from memtape import _native
from memtape.live_view.process_state import process_running
from memtape.live_view.screen_lines import (
    MIN_COLUMNS,
    MIN_LINES,
    Source,
    screen_lines,
)
from memtape.live_view.sparkline import ASCII_STEPS, BLOCKS
from memtape.live_view.view_state import KeyAction, ViewState

#: How often the numbers are read again.
REFRESH_S = 1.0
#: How long a key is waited for at a time (keys act at once; this bounds the loop's
#: wake-ups when none comes).
KEY_WAIT_MS = 100
#: The view's non-ASCII characters, for a terminal whose encoding lacks them.
ASCII_TEXT = str.maketrans({"·": "|", "…": "~", "↑": "^", "↓": "v"})


def terminal_problem() -> str | None:
    """Why the live view cannot run in this terminal (one line), or None when it can."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return "the live view needs a terminal: standard input and output are not both one"
    size = os.get_terminal_size(sys.stdout.fileno())
    if size.columns < MIN_COLUMNS or size.lines < MIN_LINES:
        return (
            f"the terminal is {size.columns}x{size.lines}; the live view needs at least "
            f"{MIN_COLUMNS}x{MIN_LINES} (columns x lines)"
        )
    try:
        curses.setupterm(fd=sys.stdout.fileno())
    except curses.error:
        return f"curses does not know this terminal (TERM={os.environ.get('TERM', '')!r})"
    return None


@contextlib.contextmanager
def _size_from_terminal() -> Iterator[None]:
    """While the view runs, curses takes the screen's size from the terminal itself:
    LINES and COLUMNS are out of this process' environment (ncurses would take them over
    the terminal's size, and a shell or tool that exported them may hold a size that is
    not the terminal's, or no longer is: the view would be drawn for the wrong size).
    ``curses.use_env(False)`` would not do: ncurses then takes terminfo's 80x24."""
    saved = {name: os.environ.pop(name) for name in ("LINES", "COLUMNS") if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def show_live_view(path: str, pid: int | None, *, quit_note: str, note: str | None = None) -> None:
    """Shows the live view of the capture ``path`` that process ``pid`` writes, until
    the user quits (``q``, or Ctrl-C); returns then. When the process is gone and the
    capture has no trailer, reading stops at what was written. Check
    :func:`terminal_problem` first. ``quit_note`` says on the key line what quitting
    does; ``note`` is shown under the title."""
    capture = _native.LiveCapture(path)
    try:
        with _size_from_terminal():
            curses.wrapper(_run, capture, Source(path, pid, "running", quit_note, note))
    except KeyboardInterrupt:
        pass
    finally:
        capture.stop()


def _run(screen: Any, capture: _native.LiveCapture, source: Source) -> None:
    with_blocks = locale.getpreferredencoding(False).lower().replace("-", "") == "utf8"
    with _hidden_cursor():
        screen.keypad(True)
        screen.timeout(KEY_WAIT_MS)
        state = ViewState()
        due = 0.0
        while True:
            if time.monotonic() >= due:
                source = _watch_writer(capture, source)
                snapshot = _snapshot(capture, state)
                _draw(screen, snapshot, state=state, source=source, with_blocks=with_blocks)
                due = time.monotonic() + REFRESH_S
            try:
                key = screen.get_wch()
            except curses.error:
                continue  # no key within the wait
            action = state.key(key)
            if action is KeyAction.QUIT:
                return
            if action is KeyAction.REDRAW:
                _draw(
                    screen,
                    _snapshot(capture, state),
                    state=state,
                    source=source,
                    with_blocks=with_blocks,
                )


@contextlib.contextmanager
def _hidden_cursor() -> Iterator[None]:
    """Hides the cursor where the terminal can (some cannot: then it stays)."""
    try:
        was: int | None = curses.curs_set(0)
    except curses.error:
        was = None
    try:
        yield
    finally:
        if was is not None:
            with contextlib.suppress(curses.error):
                curses.curs_set(was)


def _watch_writer(capture: _native.LiveCapture, source: Source) -> Source:
    """Once the writing process is gone, reading stops at what it wrote. Without a pid
    given, the writer is the process the capture's header names."""
    pid = source.pid
    if pid is None:
        metadata = capture.metadata_json
        pid = None if metadata is None else json.loads(metadata).get("pid")
        if not isinstance(pid, int):
            return source
        source = dataclasses.replace(source, pid=pid)
    if source.process != "running" or process_running(pid):
        return source
    capture.stop()
    return dataclasses.replace(source, process="exited")


def _snapshot(capture: _native.LiveCapture, state: ViewState) -> dict[str, Any]:
    return capture.snapshot(
        table=state.view.table, by=state.view.by, limit=state.scroll + max(state.page, 1)
    )


def _draw(
    screen: Any,
    snapshot: dict[str, Any],
    *,
    state: ViewState,
    source: Source,
    with_blocks: bool,
) -> None:
    height, width = screen.getmaxyx()
    screen.erase()
    if width < MIN_COLUMNS or height < MIN_LINES:
        message = f"terminal too small ({width}x{height}); needs {MIN_COLUMNS}x{MIN_LINES}"
        lines = [message[: max(0, width - 1)]]
    else:
        # The last column is left empty: curses fails on a write into the bottom-right cell.
        lines = screen_lines(
            snapshot,
            state,
            source,
            width=width - 1,
            height=height,
            steps=BLOCKS if with_blocks else ASCII_STEPS,
        )
    for row, line in enumerate(lines):
        text = line if with_blocks else line.translate(ASCII_TEXT)
        screen.addstr(row, 0, text, curses.A_BOLD if row == 0 else curses.A_NORMAL)
    screen.refresh()
