"""The live view's screen as lines of text, from one snapshot of the analysis: the
numbers, memory over time, the sites and the keys. Drawing them is the terminal's job."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memtape.byte_size import format_size
from memtape.live_view.sparkline import sparkline, time_columns
from memtape.live_view.view_state import VIEW_KEYS, ViewState

#: The smallest terminal the view draws in: the header (7 lines), a few sites, the keys.
MIN_COLUMNS = 60
MIN_LINES = 12
#: Lines above the sites and below them.
HEADER_LINES = 7
FOOTER_LINES = 1
#: Where a site's label starts on its line (after its bytes and blocks).
SITE_COLUMN = 22
#: What a site without a Python frame is called (as in the flame graph).
NO_PYTHON_FRAME = "[no Python frame]"
#: The file name of a frame whose stack the capture has not defined (yet).
UNRESOLVED = "<unresolved>"
#: Such a site while the recording goes on: the recorder writes a stack's definition
#: after the blocks that use it (it resolves stacks on the main thread, between
#: bytecodes), so for a moment the view has the blocks and not yet their traceback.
NOT_WRITTEN_YET = "[traceback not written yet]"


@dataclass(frozen=True)
class Source:
    """What the view says about where the numbers come from."""

    #: The capture file.
    path: str
    #: The recording process, and what its state reads as now.
    pid: int | None
    process: str
    #: What quitting does, for the key line.
    quit_note: str
    #: Shown under the title (e.g. where the program's output goes), or None.
    note: str | None = None


def grouped(n: int) -> str:
    """``1234567`` -> ``"1,234,567"``."""
    return f"{n:,}"


def _split(pairs: Sequence[tuple[str, int]]) -> str:
    """``python 1.0 MiB · native 2.0 MiB · frameworks 0 B`` (NumPy-like framework and
    MLX buffers added up as frameworks)."""
    by = dict(pairs)
    frameworks = by.get("framework", 0) + by.get("mlx", 0)
    return (
        f"python {format_size(by.get('python', 0))} · native {format_size(by.get('native', 0))}"
        f" · frameworks {format_size(frameworks)}"
    )


def site_label(
    frames: Sequence[tuple[str, str, int]], by: str, width: int, *, recording: bool = False
) -> str:
    """``app.py:12 in load`` (by line) or ``app.py`` (by file), in ``width`` characters:
    the file name relative to the current directory when it lies below it, and cut at
    its start when too long (``…/numpy/_core/numeric.py:212 in ones``), so that the
    line and the function stay in view. While ``recording``, a stack not defined yet
    is said to be so."""
    if not frames:
        return NO_PYTHON_FRAME
    filename, function, line = frames[0]
    if recording and filename == UNRESOLVED:
        return NOT_WRITTEN_YET
    if os.path.isabs(filename):
        relative = os.path.relpath(filename)
        if not relative.startswith(".."):
            filename = relative
    where = "" if by == "filename" else f":{line} in {function}"
    room = width - len(where)
    if len(filename) > room >= 10:
        filename = "…" + filename[len(filename) - room + 1 :]
    return filename + where


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def _state_line(snapshot: dict[str, Any], source: Source) -> str:
    ended = snapshot["ended"]
    if ended is None:
        reading = "recording" if snapshot["started"] else "waiting for the capture's header"
    elif ended == "complete":
        reading = "recording ended (complete)"
    elif ended == "cut short":
        reading = "recording ended (cut short)"
    else:
        reading = f"cannot read: {ended}"
    pid = "" if source.pid is None else f" · pid {source.pid} {source.process}"
    return f"memtape live · {source.path}{pid} · {snapshot['time']:.1f} s · {reading}"


def screen_lines(
    snapshot: dict[str, Any],
    state: ViewState,
    source: Source,
    *,
    width: int,
    height: int,
    steps: str,
) -> list[str]:
    """The screen: ``height`` lines at most, each at most ``width`` characters."""
    view = state.view
    sites = snapshot["sites"]
    state.page = max(1, height - HEADER_LINES - FOOTER_LINES)
    state.sites_count = snapshot["sites_count"]
    state.scroll_by(0)  # the table may have shrunk
    span = f" 0-{snapshot['time']:.0f} s, top "
    spark_width = max(10, width - len("memory ") - len(span) - 10)
    # The last point: memory now, at the last time stamp.
    points = [*snapshot["series"], (snapshot["time"], snapshot["current"])]
    columns = time_columns(points, spark_width, snapshot["time"])
    tabs = "  ".join(
        f"[{key}] {v.title}" + (" *" if v is view else "") for key, v in VIEW_KEYS.items()
    )
    lines = [
        _state_line(snapshot, source),
        source.note or "",
        f"now  {format_size(snapshot['current']):>10}   {_split(snapshot['current_by_source'])}",
        f"peak {format_size(snapshot['peak']):>10}   {_split(snapshot['peak_by_source'])}"
        f" · at {snapshot['peak_time']:.1f} s",
        f"memory {sparkline(columns, spark_width, steps=steps)}{span}"
        f"{format_size(max(columns, default=0))}",
        tabs,
        f"{'bytes':>10} {'blocks':>9}  {view.title}: {grouped(snapshot['sites_count'])} sites, "
        f"{format_size(snapshot['sites_total'])}",
    ]
    shown = sites[state.scroll : state.scroll + state.page]
    for frames, size, count in shown:
        recording = snapshot["ended"] is None
        label = site_label(frames, view.by, width - SITE_COLUMN, recording=recording)
        lines.append(f"{format_size(size):>10} {grouped(count):>9}  {label}")
    lines += [""] * (height - FOOTER_LINES - len(lines))
    lines.append(f"↑↓ j k PgUp PgDn scroll · Tab next view · q quit ({source.quit_note})")
    return [_fit(line, width) for line in lines[:height]]
