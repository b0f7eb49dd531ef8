"""memtape as the process's tracer: the standard library's ``tracemalloc`` answers with
memtape's recorder.

Most callers of tracemalloc are not the program: ``warnings`` (the "Object allocated at"
of a ``ResourceWarning``), pytest's warning summary and asyncio's debug mode all do
``import tracemalloc`` and ask ``is_tracing()`` and ``get_object_traceback()``. After
:func:`install`, every way of reaching the standard library's tracer reaches memtape's:

- ``sys.modules["_tracemalloc"]`` is :mod:`memtape._tracemalloc`, so a ``tracemalloc``
  imported later (``warnings`` imports it lazily, at warning time) is built on memtape;
- a ``tracemalloc`` already imported gets memtape's ten ``_tracemalloc`` functions in
  place of the builtin ones (its classes stay the standard library's, so snapshots
  remain ``tracemalloc.Snapshot`` objects and pickle as before);
- the builtin ``_tracemalloc`` module object, for code that kept a reference to it,
  gets them too;
- a builtin tracer already running (``-X tracemalloc``, ``PYTHONTRACEMALLOC``) is stopped
  and memtape takes over with its traceback limit, so there is one tracer, never two.

The builtin tracer is then unreachable from Python: ``tracemalloc.start()`` starts (or,
when tracing, leaves alone) memtape's tracer, as the standard library does for its own.
"""

from __future__ import annotations

import sys
from types import ModuleType

from memtape import _tracemalloc as backend

# What makes memtape the tracer of a new interpreter (read by memtape_startup.pth), as
# PYTHONTRACEMALLOC does for the builtin one.
ENV_VAR = "MEMTAPE_TRACEMALLOC"

# The ten names of the builtin `_tracemalloc` (tracemalloc.py imports them all).
FUNCTIONS = (*backend.__all__, "_get_object_traceback", "_get_traces")

# The builtin module's own functions, kept before install() replaces them.
_builtin_functions: dict[str, object] = {}


def _builtin_module() -> ModuleType:
    """The interpreter's builtin ``_tracemalloc``, whatever ``sys.modules`` holds now."""
    held = sys.modules.get("_tracemalloc")
    if held is None:
        import _tracemalloc

        return _tracemalloc
    if held is backend:
        # Put there by someone else (CPython's conformance shim does): find the original.
        import importlib.machinery
        import importlib.util

        spec = importlib.machinery.BuiltinImporter.find_spec("_tracemalloc")
        assert spec is not None, "CPython always has a builtin _tracemalloc"
        held = importlib.util.module_from_spec(spec)
    return held


def _redirect(module: ModuleType) -> None:
    for name in FUNCTIONS:
        setattr(module, name, getattr(backend, name))


def installed() -> bool:
    """Whether memtape is the process's tracer."""
    return sys.modules.get("_tracemalloc") is backend and bool(_builtin_functions)


def builtin_is_tracing() -> bool:
    """Whether CPython's own tracer is running (its tables, not memtape's)."""
    if _builtin_functions:
        return bool(_builtin_functions["is_tracing"]())  # type: ignore[operator]
    return bool(_builtin_module().is_tracing())


def install() -> None:
    """Makes memtape the process's tracer (idempotent); see the module documentation."""
    if installed():
        return
    builtin = _builtin_module()
    _builtin_functions.update({name: getattr(builtin, name) for name in FUNCTIONS})
    limit = None
    if builtin.is_tracing():
        # The core started it at start-up; memtape takes over with the same limit.
        limit = builtin.get_traceback_limit()
        builtin.stop()
    _redirect(builtin)
    sys.modules["_tracemalloc"] = backend
    stdlib = sys.modules.get("tracemalloc")
    if stdlib is not None and stdlib.__name__ == "tracemalloc":
        _redirect(stdlib)
    if limit is not None:
        backend.start(limit)
