"""memtape: which line of my code owns this memory, and when?

The public faces are :mod:`memtape.tracemalloc` (a drop-in, faster ``tracemalloc``) and
the ``memtape`` command line. The recorder itself is the Rust extension
``memtape._native``.
"""

from __future__ import annotations

import os
import sys

SUPPORTED_PYTHONS: tuple[tuple[int, int], ...] = ((3, 11), (3, 12), (3, 13), (3, 14), (3, 15))


def _check_interpreter() -> None:
    version = sys.version_info[:2]
    if sys.implementation.name != "cpython" or version not in SUPPORTED_PYTHONS:
        supported = ", ".join(f"{major}.{minor}" for major, minor in SUPPORTED_PYTHONS)
        raise ImportError(
            f"memtape supports CPython {supported}; this is "
            f"{sys.implementation.name} {sys.version.split()[0]}. "
            "Run memtape with one of the supported interpreters."
        )
    # A free-threaded build says so in its ABI flags ("t", as in python3.14t), whether or
    # not its GIL was turned back on (PYTHON_GIL=1).
    free_threaded = "t" in getattr(sys, "abiflags", "")
    if free_threaded or getattr(sys, "_is_gil_enabled", lambda: True)() is False:
        raise ImportError(
            "memtape does not support free-threaded CPython builds (3.13t, 3.14t, 3.15t) "
            f"yet; this is {sys.version.split()[0]} with ABI flags "
            f"{getattr(sys, 'abiflags', '')!r}. Use the default (GIL) build of CPython "
            f"{SUPPORTED_PYTHONS[0][0]}.{SUPPORTED_PYTHONS[0][1]} to "
            f"{SUPPORTED_PYTHONS[-1][0]}.{SUPPORTED_PYTHONS[-1][1]}."
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

# The native side calls into _numpy_bridge whenever recording starts or stops; importing
# it here means no import ever runs on those paths (a fork while another thread held the
# module's import lock would leave the child waiting for it forever).
# MEMTAPE_TEST_LAZY_IMPORT=1 is a test-only switch that brings the lazy import back, so
# that tests/test_stress.py can show its watchdog catches the hang.
if os.environ.get("MEMTAPE_TEST_LAZY_IMPORT") == "1":
    from memtape import _native

    def _lazy_numpy_sync(active: bool) -> None:
        # As before the fix, the first call also imports importlib.abc (the bridge's ABCs).
        import importlib.abc  # noqa: F401

        import memtape._numpy_bridge

        memtape._numpy_bridge.sync(active)

    _native._set_numpy_bridge(_lazy_numpy_sync)
else:
    from memtape import _numpy_bridge  # noqa: F401 - registers itself with _native


def load_ipython_extension(ipython: object) -> None:
    """``%load_ext memtape``: the ``%%memtape`` and ``%memtape_top`` magics
    (:mod:`memtape.notebook`; IPython is imported only then)."""
    from memtape.notebook import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: object) -> None:
    """``%unload_ext memtape``."""
    from memtape.notebook import unload_ipython_extension as unload

    unload(ipython)


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
