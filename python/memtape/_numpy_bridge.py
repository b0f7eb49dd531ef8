"""Routes NumPy's array buffers through memtape while memtape records.

NumPy allocates array data with its own allocator (NEP 49), out of the PEP 445 hooks'
sight. While tracemalloc or the event recorder runs, memtape installs a NumPy memory
handler that records each buffer (tracemalloc domain 389047, the domain NumPy itself
uses). If NumPy is not imported yet, the handler is installed right after it is.

``memtape`` imports this module up front and it registers ``sync`` with the native side,
which calls it when recording starts or stops: importing it then, lazily, held its import
lock at a moment when another thread may fork, and the child waited for that lock forever.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from memtape import _native

if TYPE_CHECKING:
    from importlib.abc import Loader as _LoaderBase
    from importlib.abc import MetaPathFinder as _FinderBase
else:  # importlib.abc costs ~13 ms to import; the import system needs only the methods
    _LoaderBase = _FinderBase = object


class _State:
    """Whether memtape wants NumPy's buffers recorded now."""

    wanted = False


def _install() -> None:
    # An unusual numpy must never break the traced program: without the handler, its
    # buffers are simply not recorded.
    with contextlib.suppress(Exception):
        _native.install_numpy_handler()


class _AfterNumpyImport(_LoaderBase):
    """Runs numpy's own loader, then installs the handler."""

    def __init__(self, inner: _LoaderBase) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        if _State.wanted:
            _install()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _NumpyImportWatcher(_FinderBase):
    """Finds nothing itself; wraps the loader of the ``numpy`` package when it is found."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "numpy":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _AfterNumpyImport(spec.loader)
                return spec
        return None


_watcher = _NumpyImportWatcher()


def sync(active: bool) -> None:
    """Called by memtape when recording starts (True) or stops everywhere (False)."""
    _State.wanted = active
    if active:
        if "numpy" in sys.modules:
            _install()
        elif _watcher not in sys.meta_path:
            sys.meta_path.insert(0, _watcher)
    else:
        if _watcher in sys.meta_path:
            sys.meta_path.remove(_watcher)
        if "numpy" in sys.modules:
            with contextlib.suppress(Exception):
                _native.uninstall_numpy_handler()


_native._set_numpy_bridge(sync)
