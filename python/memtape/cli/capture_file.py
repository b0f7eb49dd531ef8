"""Opening a capture for a reading command: progress on a terminal, clean errors."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import NoReturn

from memtape import _native


class Progress:
    """A one-line progress bar on stderr, only when stderr is a terminal."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.enabled = sys.stderr.isatty()
        self.started = time.monotonic()
        self.drawn = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total <= 0 or time.monotonic() - self.started < 0.3:
            return
        width = 30
        filled = min(width, done * width // total)
        percent = min(100, done * 100 // total)
        bar = "#" * filled + "-" * (width - filled)
        sys.stderr.write(f"\r{self.label} [{bar}] {percent:3d}%")
        sys.stderr.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            sys.stderr.write("\r" + " " * (len(self.label) + 40) + "\r")
            sys.stderr.flush()


def fail(command: str, message: str) -> NoReturn:
    """Prints ``memtape COMMAND: message`` and exits with status 2."""
    print(f"memtape {command}: {message}", file=sys.stderr)
    raise SystemExit(2)


def refuse_overwrite(command: str, path: str, force: bool) -> None:
    """Exits with status 2 when ``path`` exists and ``--force`` was not given."""
    if os.path.exists(path) and not force:
        fail(command, f"{path} already exists; use --force to overwrite it")


def open_capture(
    command: str, path: str, moments: Sequence[str] = (), imports: str = "hide"
) -> _native.Capture:
    """Reads and analyzes ``path``, import machinery shown as ``imports`` says; exits
    with status 2 on a bad or missing file. Only ``report`` builds the HTML report's
    time-window data."""
    progress = Progress(f"reading {path}")
    try:
        capture = _native.analyze_capture(
            path,
            moments=list(moments),
            progress=progress if progress.enabled else None,
            time_window=command == "report",
            imports=imports,
        )
    except _native.CaptureFileError as exc:
        fail(command, str(exc))
    except OSError as exc:
        fail(command, str(exc))
    finally:
        progress.close()
    print_damage_note(command, path, capture)
    if capture.cut_short_at is not None:
        print(
            f"memtape {command}: note: {path} was cut short (the program was killed or the "
            f"disk filled up); read up to offset {capture.cut_short_at}",
            file=sys.stderr,
        )
    for note in capture.native_notes:
        print(f"memtape {command}: note: {note}", file=sys.stderr)
    from memtape.cli.attach_note import attach_note, attached_info

    attached = attached_info(capture)
    if attached is not None:
        print(f"memtape {command}: note: {attach_note(attached)}", file=sys.stderr)
    return capture


def print_damage_note(command: str, path: str, capture: _native.Capture) -> None:
    """Warns that ``path`` was read around damaged blocks: what was skipped and lost, and
    that the figures are incomplete (nothing when it is undamaged)."""
    if capture.damage_note is not None:
        print(
            f"memtape {command}: warning: {path} is damaged: {capture.damage_note}",
            file=sys.stderr,
        )


def write_text(command: str, path: str, text: str) -> None:
    """Writes an output file, exiting with status 2 when it cannot."""
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        fail(command, f"cannot write {path}: {exc.strerror or exc}")
