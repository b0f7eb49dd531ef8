"""Proxy backend: CPython's builtin ``_tracemalloc`` behind Python-level forwarders.

It validates the conformance harness itself: substituted through the same seam
as memtape, it must pass the whole suite, because every call ends up in the C
tracer. Each of the 10 names is a distinct Python function, so
``tracemalloc.start is _tracemalloc.start`` holds only for the substitute.
"""

from __future__ import annotations

import _tracemalloc as _builtin
from collections.abc import Callable
from typing import Any

if _builtin.__spec__ is None or _builtin.__spec__.origin != "built-in":
    raise ImportError(f"tracemalloc_proxy must be imported before the substitution: {_builtin!r}")

#: the names CPython's ``_tracemalloc`` exports
NAMES: tuple[str, ...] = (
    "start",
    "stop",
    "is_tracing",
    "clear_traces",
    "get_traceback_limit",
    "get_traced_memory",
    "reset_peak",
    "get_tracemalloc_memory",
    "_get_traces",
    "_get_object_traceback",
)


def _forwarder(name: str) -> Callable[..., Any]:
    target = getattr(_builtin, name)

    def forward(*args: Any, **kwargs: Any) -> Any:
        return target(*args, **kwargs)

    forward.__name__ = forward.__qualname__ = name
    forward.__doc__ = target.__doc__
    return forward


for _name in NAMES:
    globals()[_name] = _forwarder(_name)
del _name

__all__ = [name for name in NAMES if not name.startswith("_")]
