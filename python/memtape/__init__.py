"""memtape: which line of my code owns this memory, and when?

The public faces are :mod:`memtape.tracemalloc` (a drop-in, faster ``tracemalloc``) and
the ``memtape`` command line. The recorder itself is the Rust extension
``memtape._native``.
"""

from __future__ import annotations

import sys

SUPPORTED_PYTHONS: tuple[tuple[int, int], ...] = ((3, 11), (3, 12), (3, 13))


def _check_interpreter() -> None:
    version = sys.version_info[:2]
    if sys.implementation.name != "cpython" or version not in SUPPORTED_PYTHONS:
        supported = ", ".join(f"{major}.{minor}" for major, minor in SUPPORTED_PYTHONS)
        raise ImportError(
            f"memtape supports CPython {supported}; this is "
            f"{sys.implementation.name} {sys.version.split()[0]}. "
            "Run memtape with one of the supported interpreters."
        )
    if getattr(sys, "_is_gil_enabled", lambda: True)() is False:
        raise ImportError(
            "memtape does not support free-threaded CPython builds yet; "
            "use the default (GIL) build of CPython 3.11, 3.12 or 3.13."
        )


_check_interpreter()

from memtape.events import (  # noqa: E402 - after the interpreter check
    ALLOCATOR_ACTIONS,
    capture_traceback,
    dump_snapshot,
    get_memory_events,
    is_recording_memory_events,
    mark,
    op_context,
    record_allocator_event,
    record_memory_events,
)

__version__ = "0.1.0"
__all__ = [
    "ALLOCATOR_ACTIONS",
    "SUPPORTED_PYTHONS",
    "__version__",
    "capture_traceback",
    "dump_snapshot",
    "get_memory_events",
    "is_recording_memory_events",
    "mark",
    "op_context",
    "record_allocator_event",
    "record_memory_events",
]
