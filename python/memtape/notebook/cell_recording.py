"""One ``%%memtape`` cell recorded into a capture file, in the kernel's own process.

The kernel's frames (ipykernel, tornado, asyncio, IPython's ``run_cell``, the cell line
calling the magic, memtape's) sit below the cell's in every stack recorded on its
thread: they are the capture's launcher frames, which every report leaves out, as it
does ``memtape run``'s own. Cells are shown by their label (``Cell In[3]``), not by the
file name IPython generated for them."""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass

from memtape import _native
from memtape._program import program_launcher_files
from memtape.capture_metadata import capture_metadata

#: Frames kept per stack below the magic, on top of the kernel's own (as ``memtape run``).
NFRAME = 64


@dataclass(frozen=True)
class CellCapture:
    """A finished cell's capture, analyzed."""

    label: str
    path: str
    saved: bool
    capture: _native.Capture
    events: int
    raised: BaseException | None


def kernel_files() -> list[str]:
    """The files of every frame below the caller: the same below the cell's code."""
    files: list[str] = []
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename not in files:
            files.append(filename)
        frame = frame.f_back  # type: ignore[assignment]
    return files


def _depth() -> int:
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back  # type: ignore[assignment]
    return depth


def metadata(label: str, native_heap: bool, shown_files: dict[str, str]) -> str:
    """The capture header's metadata for a cell."""
    return capture_metadata(
        command="%%memtape",
        argv=[label],
        nframe=NFRAME + _depth(),
        min_size=0,
        native_heap=native_heap,
        launcher_files=[*program_launcher_files()[:1], *kernel_files()],
        file_names=shown_files,
    )


def kernel_threads() -> list[int]:
    """The kernel thread ids of this process' threads other than the caller: the kernel's
    own (its I/O, heartbeat and control threads, ZeroMQ's), Python's or not."""
    me = threading.get_native_id()
    try:
        return [int(tid) for tid in os.listdir("/proc/self/task") if int(tid) != me]
    except OSError:  # no /proc: Python's threads at least
        return [t.native_id for t in threading.enumerate() if t.native_id not in (None, me)]


def start(path: str, meta: str, native_heap: bool) -> str | None:
    """Starts recording into ``path``; None, or why it cannot (a capture already records:
    ``memtape run`` around the kernel, or a ``%%memtape`` inside another; a bad path).
    The kernel's other threads are left out: what they do meanwhile is not the cell's
    (threads the cell starts are recorded)."""
    _native._record_threads_except(kernel_threads())
    try:
        _native._start_capture(path, meta, 0, native_heap)
    except (RuntimeError, OSError) as exc:
        _native._record_threads_except([])
        return str(exc)
    return None


def stop(raised: BaseException | None) -> int:
    """Ends the capture, noting how the cell ended; the number of events."""
    if raised is None:
        exit_kind, code = "normal", 0
    elif isinstance(raised, KeyboardInterrupt):
        exit_kind, code = "signal", 130
    else:
        exit_kind, code = "exception", 1
    try:
        events, _ = _native._stop_capture(exit_kind, code)
    finally:
        _native._record_threads_except([])
    return events


def analyze(
    path: str, saved: bool, label: str, events: int, raised: BaseException | None
) -> CellCapture:
    """Reads the finished capture."""
    return CellCapture(label, path, saved, _native.analyze_capture(path), events, raised)
