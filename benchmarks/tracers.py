"""The tracer configurations the benchmark runner compares, and how each one is started.

A configuration is named by a string: ``untraced``, ``tracemalloc<N>`` (stdlib
``tracemalloc.start(N)``), ``memtape<N>`` (``memtape.tracemalloc.start(N)``) or
``memray`` (``memray.Tracker(file, trace_python_allocators=True)``, the mode that sees
every pymalloc allocation, as tracemalloc does), ``memtape-events`` (the event recorder:
``memtape.record_memory_events(True, 100_000)``, Python heap, the last 100k events) and
``memtape-capture`` (``memtape run --no-native-heap``'s recording: every Python-heap event
streamed to a capture file, like memray's) and ``memtape-native`` (``memtape run``'s
default: the same plus native malloc/mmap calls through the patched GOT slots).

Starting and stopping happen in the measuring child process (single_run.py), outside the
timed window; the runner itself only parses names.
"""

from __future__ import annotations

import importlib
import os
import platform
import re
from dataclasses import dataclass
from types import ModuleType
from typing import Any

DEFAULT_CONFIGS = (
    "untraced",
    "tracemalloc1",
    "tracemalloc25",
    "memtape1",
    "memtape25",
    "memtape32",
    "memray",
)

MAX_NFRAME = 65535  # tracemalloc's limit on start(nframe)
_NAME = re.compile(
    r"(?P<tracer>untraced|tracemalloc|memtape-events|memtape-capture|memtape-native|memtape|memray)"
    r"(?P<nframe>[0-9]*)"
)
_TRACEMALLOC_MODULES = {"tracemalloc": "tracemalloc", "memtape": "memtape.tracemalloc"}


class TracerUnavailable(Exception):
    """The tracer cannot be imported into this interpreter; `hint` says how to fix that."""

    def __init__(self, reason: str, hint: str) -> None:
        super().__init__(reason)
        self.hint = hint


@dataclass(frozen=True)
class TracerConfig:
    name: str
    tracer: str
    nframe: int | None

    @classmethod
    def parse(cls, name: str) -> TracerConfig:
        match = _NAME.fullmatch(name.strip())
        if match is None:
            raise ValueError(
                f"unknown configuration {name!r}: use untraced, tracemalloc<N>, memtape<N> "
                "memray, memtape-events, memtape-capture or memtape-native (for example "
                "tracemalloc25)"
            )
        tracer, digits = match["tracer"], match["nframe"]
        if tracer in _TRACEMALLOC_MODULES:
            if not digits or not 1 <= int(digits) <= MAX_NFRAME:
                raise ValueError(
                    f"{name!r}: {tracer} needs a frame count 1..{MAX_NFRAME}, e.g. {tracer}25"
                )
            return cls(name=f"{tracer}{int(digits)}", tracer=tracer, nframe=int(digits))
        if digits:
            raise ValueError(f"{name!r}: {tracer} takes no frame count")
        return cls(name=tracer, tracer=tracer, nframe=None)

    @property
    def stdlib_peer(self) -> str | None:
        """For a memtape configuration, the stdlib configuration with the same nframe."""
        return f"tracemalloc{self.nframe}" if self.tracer == "memtape" else None


class ActiveTracer:
    """A started tracer; stop() ends it and returns what it reports about the run."""

    def stop(self) -> dict[str, Any]:
        return {}


class _TracemallocTracer(ActiveTracer):
    def __init__(self, module: ModuleType, nframe: int) -> None:
        self._module = module
        module.start(nframe)
        if not module.is_tracing():
            module.stop()
            raise RuntimeError(
                f"{module.__name__}.start({nframe}) returned but is_tracing() is False"
            )

    def stop(self) -> dict[str, Any]:
        stats: dict[str, Any] = {}
        try:
            current, peak = self._module.get_traced_memory()
            stats = {"traced_current_bytes": current, "traced_peak_bytes": peak}
        finally:
            self._module.stop()
        return stats


class _MemrayTracer(ActiveTracer):
    def __init__(self, memray: ModuleType, scratch_dir: str) -> None:
        self._path = os.path.join(scratch_dir, f"memray-{os.getpid()}.bin")
        self._tracker = memray.Tracker(
            self._path, native_traces=False, trace_python_allocators=True
        )
        self._tracker.__enter__()

    def stop(self) -> dict[str, Any]:
        self._tracker.__exit__(None, None, None)
        try:
            return {"capture_bytes": os.path.getsize(self._path)}
        finally:
            os.unlink(self._path)


class _MemtapeEventsTracer(ActiveTracer):
    def __init__(self, memtape: ModuleType) -> None:
        self._memtape = memtape
        memtape.record_memory_events(True, 100_000)

    def stop(self) -> dict[str, Any]:
        self._memtape.record_memory_events(False)
        kept, dropped = self._memtape._native.memory_event_counts()
        return {"events_kept": kept, "events_seen": kept + dropped}


class _MemtapeCaptureTracer(ActiveTracer):
    def __init__(self, memtape: ModuleType, scratch_dir: str, native: bool) -> None:
        self._native = memtape._native
        self._path = os.path.join(scratch_dir, f"memtape-{os.getpid()}.mtape")
        metadata = '{"tool": "memtape", "nframe": 64}'
        self._native._start_capture(self._path, metadata, 0, native)

    def stop(self) -> dict[str, Any]:
        events, _ = self._native._stop_capture()
        try:
            return {"capture_bytes": os.path.getsize(self._path), "capture_events": events}
        finally:
            os.unlink(self._path)


def _import(module_name: str, hint: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise TracerUnavailable(f"cannot import {module_name}: {exc}", hint) from exc


def _module_for(config: TracerConfig) -> ModuleType | None:
    if config.tracer in ("memtape-events", "memtape-capture", "memtape-native"):
        return _import(
            "memtape",
            "build memtape into the interpreter given by --python: scripts/venv.sh 3.11, "
            "then --python .venv-3.11/bin/python",
        )
    if config.tracer == "memtape":
        return _import(
            "memtape.tracemalloc",
            "build memtape into the interpreter given by --python: scripts/venv.sh 3.11, "
            "then --python .venv-3.11/bin/python",
        )
    if config.tracer == "tracemalloc":
        return _import("tracemalloc", "this interpreter was built without tracemalloc")
    if config.tracer == "memray":
        return _import(
            "memray",
            "install it into the interpreter given by --python: PYTHON -m pip install memray",
        )
    return None


def version_of(config: TracerConfig) -> str:
    """Imports the tracer (TracerUnavailable if it cannot) and returns its version string."""
    module = _module_for(config)
    if config.tracer.startswith("memtape"):
        package = importlib.import_module("memtape")
        return f"memtape {getattr(package, '__version__', '(no __version__)')}"
    if config.tracer == "memray" and module is not None:
        return f"memray {getattr(module, '__version__', '?')}"
    return f"CPython {platform.python_version()}"


def start(config: TracerConfig, scratch_dir: str) -> ActiveTracer:
    """Starts the tracer of `config`; raises TracerUnavailable if it cannot be imported."""
    module = _module_for(config)
    if module is None:
        return ActiveTracer()
    if config.tracer == "memray":
        return _MemrayTracer(module, scratch_dir)
    if config.tracer == "memtape-events":
        return _MemtapeEventsTracer(module)
    if config.tracer in ("memtape-capture", "memtape-native"):
        return _MemtapeCaptureTracer(module, scratch_dir, config.tracer == "memtape-native")
    assert config.nframe is not None
    return _TracemallocTracer(module, config.nframe)
