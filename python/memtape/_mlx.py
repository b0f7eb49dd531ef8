"""MLX's buffers as a framework source of their own.

While something records (``record_memory_events`` with the ``"framework"`` source, or
``memtape run``), memtape puts a forwarding allocator in front of MLX's: every buffer
MLX hands out or takes back is reported with the caching allocator's action (a new
block, a cache hit, a free into the cache or back to the OS, an eviction). It is
attached when recording starts with ``mlx.core`` already imported, or right after
``mlx.core`` is imported; stopping gives MLX its own allocator back.

Only MLX versions whose allocator layout was checked are watched; on any other a
warning is given once and everything else is traced as usual.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import types
import warnings
from typing import TYPE_CHECKING, Any

from memtape import _native

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from importlib.abc import Loader as _LoaderBase
    from importlib.abc import MetaPathFinder as _FinderBase
else:  # importlib.abc costs ~13 ms to import; the import system needs only the methods
    _LoaderBase = _FinderBase = object

__all__ = ["follow", "is_attached", "sync"]

#: MLX versions whose allocator layout and cache semantics memtape was checked against.
VERIFIED_VERSIONS = ("0.32.4",)
#: The functions that evict from MLX's cache without passing through its allocator.
_EVICTING = ("clear_cache", "set_cache_limit")

_followers: set[str] = set()
_warned: list[str] = []  # the warning given, once per process
_wrapped: dict[str, Callable[..., Any]] = {}


def _warn_once(message: str) -> None:
    if not _warned:
        _warned.append(message)
        warnings.warn(
            f"memtape: {message}; MLX's buffers are not recorded", RuntimeWarning, stacklevel=3
        )


def is_attached() -> bool:
    """True while MLX's allocator is watched."""
    return bool(_native._mlx_status()[0])


def sync() -> None:
    """Report cache evictions that happened since MLX last allocated or freed."""
    _native._mlx_sync()


def follow(who: str, on: bool) -> None:
    """``who`` (``"events"``, ``"capture"``) starts or stops wanting MLX's buffers; the
    first one attaches (now or when ``mlx.core`` is imported), the last one detaches."""
    if on:
        _followers.add(who)
    else:
        _followers.discard(who)
    if _followers:
        if not any(isinstance(f, _ImportWatcher) for f in sys.meta_path):
            sys.meta_path.insert(0, _ImportWatcher())
        _attach_if_loaded()
    else:
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _ImportWatcher)]
        _detach()


def _unverified(core: types.ModuleType) -> str | None:
    version = str(getattr(core, "__version__", "unknown"))
    if version not in VERIFIED_VERSIONS:
        known = ", ".join(VERIFIED_VERSIONS)
        return f"MLX {version} is not a version memtape knows (it knows {known})"
    for backend in ("metal", "cuda"):
        module = getattr(core, backend, None)
        available = getattr(module, "is_available", None)
        if callable(available) and available():
            return f"MLX's {backend} allocator is not one memtape knows (it knows the CPU one)"
    return None


def _attach_if_loaded() -> None:
    core = sys.modules.get("mlx.core")
    if core is None or not getattr(core, "__file__", None) or is_attached():
        return
    problem = _unverified(core)
    if problem is not None:
        _warn_once(problem)
        return
    library = os.path.join(os.path.dirname(str(core.__file__)), "lib", "libmlx.so")
    try:
        _native._mlx_attach(library)
    except RuntimeError as exc:
        _warn_once(str(exc))
        return
    for name in _EVICTING:
        original = getattr(core, name, None)
        if callable(original):
            _wrapped[name] = original
            setattr(core, name, _evicting(original))


def _evicting(original: Callable[..., Any]) -> Callable[..., Any]:
    def evict(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        finally:
            _native._mlx_sync()

    evict.__name__ = getattr(original, "__name__", "evict")
    evict.__doc__ = getattr(original, "__doc__", None)
    evict.__wrapped__ = original  # type: ignore[attr-defined]
    return evict


def _detach() -> None:
    if not is_attached():
        return
    _native._mlx_sync()
    _native._mlx_detach()
    core = sys.modules.get("mlx.core")
    for name, original in _wrapped.items():
        if core is not None and getattr(getattr(core, name, None), "__wrapped__", None) is original:
            setattr(core, name, original)
    _wrapped.clear()


class _ImportWatcher(_FinderBase):
    """Attaches right after ``mlx.core`` is imported (it loads ``libmlx.so``)."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "mlx.core":
            return None
        later = sys.meta_path[sys.meta_path.index(self) + 1 :] if self in sys.meta_path else []
        for finder in later:
            find = getattr(finder, "find_spec", None)
            spec: importlib.machinery.ModuleSpec | None = (
                find(fullname, path, target) if find is not None else None
            )
            if spec is not None and spec.loader is not None:
                spec.loader = _AttachAfter(spec.loader)
                return spec
        return None


class _AttachAfter(_LoaderBase):
    """Runs the real loader, gives the module its real loader back, then attaches."""

    def __init__(self, loader: _LoaderBase) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        if _followers:
            _attach_if_loaded()
