"""memtape's replacement for CPython's private ``_tracemalloc`` module.

It exposes exactly the ten names of ``_tracemalloc`` with the same behaviour, so the
standard library's ``tracemalloc.py`` runs unchanged on top of memtape (this is how
CPython's own test suite is run against memtape: see tests/cpython/).
"""

from __future__ import annotations

from memtape._native import (
    _get_object_traceback,
    _get_traces,
    clear_traces,
    get_traceback_limit,
    get_traced_memory,
    get_tracemalloc_memory,
    is_tracing,
    reset_peak,
    start,
    stop,
)

__all__ = [
    "clear_traces",
    "get_traceback_limit",
    "get_traced_memory",
    "get_tracemalloc_memory",
    "is_tracing",
    "reset_peak",
    "start",
    "stop",
]

# The two private names are imported explicitly by tracemalloc.py.
_PRIVATE = (_get_object_traceback, _get_traces)
