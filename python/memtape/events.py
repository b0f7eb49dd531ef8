"""The memory event recorder and the framework API.

``record_memory_events`` keeps the last N allocation events (the Python heap, and
allocators that report through the framework API) with the Python stack that caused
each; ``get_memory_events`` lists them and ``dump_snapshot`` writes them for PyTorch's
memory viewer. Frameworks attribute memory to the line that created an array with
``capture_traceback`` and ``op_context``, and report caching-allocator activity with
``record_allocator_event`` (or the same calls through the C ABI, ``include/memtape.h``).
"""

from __future__ import annotations

import operator
import os
from collections.abc import Iterable
from types import TracebackType
from typing import Any, Literal

from memtape import _mlx, _native

__all__ = [
    "ALLOCATOR_ACTIONS",
    "ALL_SOURCES",
    "SOURCES",
    "capture_traceback",
    "dump_snapshot",
    "get_memory_events",
    "is_recording_memory_events",
    "mark",
    "op_context",
    "record_allocator_event",
    "record_memory_events",
]

Source = Literal["python", "framework", "native"]
#: The sources recorded by default.
SOURCES: tuple[Source, ...] = ("python", "framework")
#: Every source ``sources`` accepts: ``"native"`` adds malloc/mmap calls of C, C++ and
#: Rust code (device -2), seen by patching the process' GOT slots while recording.
ALL_SOURCES: tuple[Source, ...] = ("python", "framework", "native")
ALLOCATOR_ACTIONS = (
    "AllocNew",
    "AllocReuse",
    "AllocMakeBuffer",
    "FreeActiveToCache",
    "FreeActiveToOS",
    "Release",
    "FreeCacheToOS",
)


def _whole(value: object, name: str, *, minimum: int | None = 0) -> int:
    """An int argument (anything with __index__), checked against ``minimum``."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not bool")
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be an integer, not {type(value).__name__}") from None
    if minimum is not None and number < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {number}")
    return number


def record_memory_events(
    enabled: bool = True,
    max_entries: int = 100_000,
    *,
    min_size: int = 0,
    sources: Iterable[Source] = SOURCES,
    max_frames: int = 64,
    native_stacks: bool = False,
) -> None:
    """Start keeping the last ``max_entries`` memory events, or stop (``enabled=False``).

    Starting again begins a new recording; stopping keeps the events for
    ``get_memory_events`` and ``dump_snapshot`` until the next start.

    ``min_size`` drops smaller allocations (and their frees); ``sources`` chooses the
    Python heap (``"python"``), framework allocators (``"framework"``) and/or native
    allocations of C, C++ and Rust code (``"native"``, not recorded by default);
    ``max_frames`` is how many frames of each stack are kept, innermost first.
    ``native_stacks`` also records the compiled (C, C++, Rust) functions between the
    Python line and each allocation; they read ``(library path, function, 0)``, named
    from the libraries' symbol tables (``memtape run --native`` captures get file and line
    from debug information at report time).
    """
    token = _native._own_work_begin()  # memtape's own work is never recorded
    try:
        _record_memory_events(
            enabled, max_entries, min_size, sources, max_frames, native_stacks=native_stacks
        )
    finally:
        _native._work_end(token)


def _record_memory_events(
    enabled: bool,
    max_entries: int,
    min_size: int,
    sources: Iterable[Source],
    max_frames: int,
    *,
    native_stacks: bool = False,
) -> None:
    if not enabled:
        _native.record_memory_events(False, 1, 0, False, False, 1)
        _mlx.follow("events", False)
        return
    entries = _whole(max_entries, "max_entries", minimum=1)
    smallest = _whole(min_size, "min_size")
    frames = _whole(max_frames, "max_frames", minimum=1)
    if isinstance(sources, str):
        raise TypeError("sources must be a collection of source names, e.g. ('python',)")
    chosen = set(sources)
    unknown = chosen - set(ALL_SOURCES)
    if unknown:
        raise ValueError(f"unknown sources {sorted(unknown)}: expected some of {list(ALL_SOURCES)}")
    if not chosen:
        raise ValueError(f"sources is empty: expected some of {list(ALL_SOURCES)}")
    _native.record_memory_events(
        True,
        entries,
        smallest,
        "python" in chosen,
        "framework" in chosen,
        min(frames, 65535),
        "native" in chosen,
        bool(native_stacks),
    )
    _mlx.follow("events", "framework" in chosen)


def is_recording_memory_events() -> bool:
    """True while memory events are being recorded."""
    return _native.is_recording_memory_events()


def get_memory_events() -> list[dict[str, Any]]:
    """The kept events, oldest first. Each is a dict with ``action``, ``address``,
    ``size``, ``requested_size``, ``device`` (-1: the Python heap, -2: native), ``stream``,
    ``thread`` (OS thread id), ``timestamp_ns`` (since the epoch, never earlier than the
    event before it), ``op`` (or None) and ``frames``: ``(filename, function, line)``
    tuples, outermost first."""
    _mlx.sync()
    return _native.get_memory_events()


def dump_snapshot(
    path: str | os.PathLike[str],
    *,
    events: Iterable[dict[str, Any]] | None = None,
    format: Literal["pickle", "json"] | None = None,
) -> None:
    """Write the recorded events for PyTorch's memory viewer (pytorch.org/memory_viz).

    ``format`` is ``"pickle"`` (what the viewer and ``torch.cuda._memory_viz`` read) or
    ``"json"`` (the web viewer reads it too); by default ``.json`` files get JSON.
    ``events`` writes events saved earlier from ``get_memory_events`` instead of the
    current recording (their allocator segments are then unknown, so none are written).

    Each framework device is one entry of the viewer's device list; the Python heap is one
    more entry after them (the first, when no framework reported events)."""
    token = _native._own_work_begin()  # memtape's own work is never recorded
    try:
        _mlx.sync()
        chosen = format or ("json" if os.fspath(path).endswith(".json") else "pickle")
        if chosen not in ("pickle", "json"):
            raise ValueError(f"format must be 'pickle' or 'json', not {format!r}")
        saved = None if events is None else list(events)
        _native.dump_snapshot(os.fspath(path), chosen, saved)
    finally:
        _native._work_end(token)


def mark(label: str) -> bool:
    """Record a named moment in the capture that ``memtape run`` is writing, for
    ``memtape diff FILE --from marker:LABEL --to ...``. Returns False (and does nothing)
    when no capture is being recorded."""
    if not isinstance(label, str):
        raise TypeError(f"label must be a str, not {type(label).__name__}")
    return _native.mark(label)


# Native, so that no memtape frame is ever part of the captured stack.
capture_traceback = _native.capture_traceback
record_allocator_event = _native.record_allocator_event


class op_context:  # noqa: N801 - used like a function, as in `with op_context(...)`
    """Attribute memory events inside the block to ``traceback`` and the op ``name``.

    Nestable and per thread. ``traceback`` is an id from ``capture_traceback`` (0: no
    stack, only the op name)."""

    __slots__ = ("name", "traceback")

    def __init__(self, name: str, traceback: int = 0) -> None:
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, not {type(name).__name__}")
        self.name = name
        self.traceback = _whole(traceback, "traceback")

    def __enter__(self) -> op_context:
        _native._push_op(self.name, self.traceback)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _native._pop_op()
