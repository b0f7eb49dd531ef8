"""A drop-in replacement for the standard library's :mod:`tracemalloc`.

``import memtape.tracemalloc as tracemalloc`` gives the same functions and classes with
the same results, tuple layouts, ordering and error messages; snapshots pickle to the
same files (``tracemalloc.Snapshot`` / ``tracemalloc._Traces``) in both directions.
Tracing runs in memtape's Rust recorder, and ``Snapshot.statistics``, ``compare_to``
and ``filter_traces`` group and select traces in Rust, building Python objects only for
the results.
"""

from __future__ import annotations

import copyreg
import fnmatch
import importlib
import linecache
import os.path
import pickle
from collections.abc import Iterable, Sequence
from functools import total_ordering
from typing import Any, Literal, overload

from memtape import _native, _process_tracer
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
    "BaseFilter",
    "DomainFilter",
    "Filter",
    "Frame",
    "Snapshot",
    "Statistic",
    "StatisticDiff",
    "Trace",
    "Traceback",
    "clear_traces",
    "get_object_traceback",
    "get_traceback_limit",
    "get_traced_memory",
    "get_tracemalloc_memory",
    "install",
    "is_tracing",
    "reset_peak",
    "start",
    "stop",
    "take_snapshot",
]

FrameTuple = tuple[str, int]
RawTrace = tuple[Any, ...]
KeyType = Literal["filename", "lineno", "traceback"]

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def _format_size(size: float, sign: bool) -> str:
    """Human size with tracemalloc's rounding: ``12.3 KiB``, ``+1024 B``."""
    value = float(size)
    for unit in _UNITS:
        if unit != "B" and abs(value) < 100:
            return f"{value:+.1f} {unit}" if sign else f"{value:.1f} {unit}"
        if unit == "TiB" or abs(value) < 10 * 1024:
            return f"{value:+.0f} {unit}" if sign else f"{value:.0f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


class Statistic:
    """Memory allocated by one group of traces (a line, a file or a traceback)."""

    __slots__ = ("count", "size", "traceback")

    def __init__(self, traceback: Traceback, size: int, count: int) -> None:
        self.traceback = traceback
        self.size = size
        self.count = count

    def __hash__(self) -> int:
        return hash((self.traceback, self.size, self.count))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Statistic):
            return NotImplemented
        return (self.traceback, self.size, self.count) == (
            other.traceback,
            other.size,
            other.count,
        )

    def __str__(self) -> str:
        text = f"{self.traceback}: size={_format_size(self.size, False)}, count={self.count:d}"
        if self.count:
            text += f", average={_format_size(self.size / self.count, False)}"
        return text

    def __repr__(self) -> str:
        return f"<Statistic traceback={self.traceback!r} size={self.size:d} count={self.count:d}>"

    def _sort_key(self) -> tuple[int, int, Traceback]:
        return (self.size, self.count, self.traceback)


class StatisticDiff:
    """How one group changed between an old and a new snapshot."""

    __slots__ = ("count", "count_diff", "size", "size_diff", "traceback")

    def __init__(
        self, traceback: Traceback, size: int, size_diff: int, count: int, count_diff: int
    ) -> None:
        self.traceback = traceback
        self.size = size
        self.size_diff = size_diff
        self.count = count
        self.count_diff = count_diff

    def _values(self) -> tuple[Traceback, int, int, int, int]:
        return (self.traceback, self.size, self.size_diff, self.count, self.count_diff)

    def __hash__(self) -> int:
        return hash(self._values())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StatisticDiff):
            return NotImplemented
        return self._values() == other._values()

    def __str__(self) -> str:
        text = (
            f"{self.traceback}: size={_format_size(self.size, False)} "
            f"({_format_size(self.size_diff, True)}), "
            f"count={self.count:d} ({self.count_diff:+d})"
        )
        if self.count:
            text += f", average={_format_size(self.size / self.count, False)}"
        return text

    def __repr__(self) -> str:
        return (
            f"<StatisticDiff traceback={self.traceback!r} size={self.size:d} "
            f"({self.size_diff:+d}) count={self.count:d} ({self.count_diff:+d})>"
        )

    def _sort_key(self) -> tuple[int, int, int, int, Traceback]:
        return (
            abs(self.size_diff),
            self.size,
            abs(self.count_diff),
            self.count,
            self.traceback,
        )


def _compare_grouped_stats(
    old_group: dict[Traceback, Statistic], new_group: dict[Traceback, Statistic]
) -> list[StatisticDiff]:
    """Pairs groups of two snapshots; groups only in the old one show as freed."""
    diffs = []
    for traceback, stat in new_group.items():
        before = old_group.pop(traceback, None)
        old_size = before.size if before is not None else 0
        old_count = before.count if before is not None else 0
        diffs.append(
            StatisticDiff(
                traceback, stat.size, stat.size - old_size, stat.count, stat.count - old_count
            )
        )
    for traceback, stat in old_group.items():
        diffs.append(StatisticDiff(traceback, 0, -stat.size, 0, -stat.count))
    return diffs


@total_ordering
class Frame:
    """One frame of a traceback: a file and a line."""

    __slots__ = ("_frame",)

    def __init__(self, frame: FrameTuple) -> None:
        self._frame = frame

    @property
    def filename(self) -> str:
        return self._frame[0]

    @property
    def lineno(self) -> int:
        return self._frame[1]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Frame):
            return NotImplemented
        return self._frame == other._frame

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Frame):
            return NotImplemented
        return self._frame < other._frame

    def __hash__(self) -> int:
        return hash(self._frame)

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno}"

    def __repr__(self) -> str:
        return f"<Frame filename={self.filename!r} lineno={self.lineno!r}>"


@total_ordering
class Traceback(Sequence[Frame]):
    """Frames from the oldest to the most recent (the allocation site is last)."""

    __slots__ = ("_frames", "_total_nframe")

    def __init__(self, frames: Sequence[FrameTuple], total_nframe: int | None = None) -> None:
        # Frames arrive most recent first, as the recorder gives them.
        self._frames: tuple[FrameTuple, ...] = tuple(reversed(frames))
        self._total_nframe = total_nframe

    @property
    def total_nframe(self) -> int | None:
        return self._total_nframe

    def __len__(self) -> int:
        return len(self._frames)

    @overload
    def __getitem__(self, index: int) -> Frame: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Frame, ...]: ...

    def __getitem__(self, index: int | slice) -> Frame | tuple[Frame, ...]:
        if isinstance(index, slice):
            return tuple(Frame(f) for f in self._frames[index])
        return Frame(self._frames[index])

    def __contains__(self, frame: object) -> bool:
        return isinstance(frame, Frame) and frame._frame in self._frames

    def __hash__(self) -> int:
        return hash(self._frames)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Traceback):
            return NotImplemented
        return self._frames == other._frames

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Traceback):
            return NotImplemented
        return self._frames < other._frames

    def __str__(self) -> str:
        return str(self[0])

    def __repr__(self) -> str:
        tail = ">" if self._total_nframe is None else f" total_nframe={self._total_nframe}>"
        return f"<Traceback {tuple(self)}{tail}"

    def format(self, limit: int | None = None, most_recent_first: bool = False) -> list[str]:
        """Lines like a Python traceback; ``limit`` keeps the most recent frames when
        positive and the oldest when negative."""
        frames: Sequence[Frame] = self
        if limit is not None:
            frames = self[-limit:] if limit > 0 else self[:limit]
        ordered: Iterable[Frame] = reversed(frames) if most_recent_first else frames
        lines = []
        for frame in ordered:
            lines.append(f'  File "{frame.filename}", line {frame.lineno}')
            source = linecache.getline(frame.filename, frame.lineno).strip()
            if source:
                lines.append(f"    {source}")
        return lines


def get_object_traceback(obj: object) -> Traceback | None:
    """Where ``obj`` was allocated, or None if that allocation was not traced."""
    frames = _get_object_traceback(obj)
    return Traceback(frames) if frames is not None else None


class Trace:
    """One traced memory block: domain, size and traceback."""

    __slots__ = ("_trace",)

    def __init__(self, trace: RawTrace) -> None:
        self._trace = trace

    @property
    def domain(self) -> int:
        return int(self._trace[0])

    @property
    def size(self) -> int:
        return int(self._trace[1])

    @property
    def traceback(self) -> Traceback:
        return Traceback(*self._trace[2:])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Trace):
            return NotImplemented
        return self._trace == other._trace

    def __hash__(self) -> int:
        return hash(self._trace)

    def __str__(self) -> str:
        return f"{self.traceback}: {_format_size(self.size, False)}"

    def __repr__(self) -> str:
        return (
            f"<Trace domain={self.domain} size={_format_size(self.size, False)}, "
            f"traceback={self.traceback!r}>"
        )


class _Traces(Sequence[Trace]):
    """The traces of a snapshot, as :class:`Trace` objects over raw tuples."""

    def __init__(self, traces: list[RawTrace]) -> None:
        self._traces = traces

    def __len__(self) -> int:
        return len(self._traces)

    @overload
    def __getitem__(self, index: int) -> Trace: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Trace, ...]: ...

    def __getitem__(self, index: int | slice) -> Trace | tuple[Trace, ...]:
        if isinstance(index, slice):
            return tuple(Trace(t) for t in self._traces[index])
        return Trace(self._traces[index])

    def __contains__(self, trace: object) -> bool:
        return isinstance(trace, Trace) and trace._trace in self._traces

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Traces):
            return NotImplemented
        return self._traces == other._traces

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<Traces len={len(self)}>"

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return _reduce_as(self, "_Traces", {"_traces": self._traces})


def _normalize_filename(filename: str) -> str:
    filename = os.path.normcase(filename)
    return filename[:-1] if filename.endswith(".pyc") else filename


class BaseFilter:
    """A filter on traces; ``inclusive`` says whether matching traces are kept."""

    def __init__(self, inclusive: bool) -> None:
        self.inclusive = inclusive

    def _match(self, trace: RawTrace) -> bool:
        raise NotImplementedError


class Filter(BaseFilter):
    """Keep (or drop) traces by filename pattern, line, and optionally domain."""

    def __init__(
        self,
        inclusive: bool,
        filename_pattern: str,
        lineno: int | None = None,
        all_frames: bool = False,
        domain: int | None = None,
    ) -> None:
        super().__init__(inclusive)
        self._filename_pattern = _normalize_filename(filename_pattern)
        self.lineno = lineno
        self.all_frames = all_frames
        self.domain = domain

    @property
    def filename_pattern(self) -> str:
        return self._filename_pattern

    def _match_frame_impl(self, filename: str, lineno: int) -> bool:
        if not fnmatch.fnmatch(_normalize_filename(filename), self._filename_pattern):
            return False
        return self.lineno is None or lineno == self.lineno

    def _match_frame(self, filename: str, lineno: int) -> bool:
        return self._match_frame_impl(filename, lineno) ^ (not self.inclusive)

    def _match_traceback(self, traceback: Sequence[FrameTuple]) -> bool:
        if not self.all_frames:
            filename, lineno = traceback[0]
            return self._match_frame(filename, lineno)
        if any(self._match_frame_impl(f, line) for f, line in traceback):
            return bool(self.inclusive)
        return not self.inclusive

    def _match(self, trace: RawTrace) -> bool:
        domain, _size, traceback = trace[0], trace[1], trace[2]
        matched = self._match_traceback(traceback)
        if self.domain is None:
            return matched
        if self.inclusive:
            return matched and domain == self.domain
        return matched or domain != self.domain


class DomainFilter(BaseFilter):
    """Keep (or drop) traces of one domain."""

    def __init__(self, inclusive: bool, domain: int) -> None:
        super().__init__(inclusive)
        self._domain = domain

    @property
    def domain(self) -> int:
        return self._domain

    def _match(self, trace: RawTrace) -> bool:
        return bool(trace[0] == self._domain) ^ (not self.inclusive)


def _stdlib_class(name: str) -> Any:
    """The class that ``tracemalloc.<name>`` names, so pickles match the stdlib's."""
    return getattr(importlib.import_module("tracemalloc"), name)


def _reduce_as(obj: object, name: str, state: dict[str, Any]) -> tuple[Any, ...]:
    """Pickles ``obj`` as an instance of ``tracemalloc.<name>`` with ``state`` as its
    ``__dict__``, so that files interchange with the standard library.

    pickle only emits NEWOBJ for an object's own class, so when ``tracemalloc`` is the
    standard library the object is rebuilt through ``copyreg._reconstructor``; both load
    anywhere. ``Snapshot.dump`` writes the standard library's exact layout instead.
    """
    cls = _stdlib_class(name)
    if cls is type(obj):
        return (copyreg.__newobj__, (cls,), state)  # type: ignore[attr-defined]
    return (copyreg._reconstructor, (cls, object, None), state)  # type: ignore[attr-defined]


# Attributes of a Snapshot that are memtape's caches, never pickled.
_TRACE_SET = "_memtape_trace_set"


def _keeps(include: list[BaseFilter], exclude: list[BaseFilter], trace: RawTrace) -> bool:
    if include and not any(f._match(trace) for f in include):
        return False
    return not (exclude and any(not f._match(trace) for f in exclude))


class Snapshot:
    """Traces of the memory blocks allocated by Python at one moment."""

    traces: _Traces
    traceback_limit: int

    def __init__(self, traces: list[RawTrace], traceback_limit: int) -> None:
        self.traces = _Traces(traces)
        self.traceback_limit = traceback_limit

    @classmethod
    def _from_trace_set(cls, trace_set: _native.TraceSet, traceback_limit: int) -> Snapshot:
        snapshot = cls.__new__(cls)
        snapshot.__dict__[_TRACE_SET] = trace_set
        snapshot.traceback_limit = traceback_limit
        return snapshot

    def __getattr__(self, name: str) -> Any:
        # `traces` is built from the Rust trace set on first use.
        trace_set = self.__dict__.get(_TRACE_SET)
        if name == "traces" and trace_set is not None:
            traces = _Traces(trace_set.raw_traces())
            self.__dict__["traces"] = traces
            return traces
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _trace_set(self) -> _native.TraceSet:
        """The traces as a Rust trace set: the one the snapshot was taken as, unless the
        Python-side traces exist (they may have been edited), which then win."""
        if "traces" in self.__dict__:
            return _native.TraceSet.from_traces(self.traces._traces)
        trace_set: _native.TraceSet = self.__dict__[_TRACE_SET]
        return trace_set

    def _pickle_state(self) -> dict[str, Any]:
        """The attributes a standard-library snapshot would have, in its order, plus any
        the user added; never memtape's caches."""
        state: dict[str, Any] = {"traces": self.traces, "traceback_limit": self.traceback_limit}
        for key, value in self.__dict__.items():
            if key != _TRACE_SET:
                state.setdefault(key, value)
        return state

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return _reduce_as(self, "Snapshot", self._pickle_state())

    def _as_tracemalloc_object(self) -> Any:
        """This snapshot as an instance of whatever ``tracemalloc.Snapshot`` is."""
        snapshot_cls, traces_cls = _stdlib_class("Snapshot"), _stdlib_class("_Traces")
        if snapshot_cls is Snapshot:
            return self
        traces = traces_cls.__new__(traces_cls)
        traces.__dict__["_traces"] = self.traces._traces
        snapshot = snapshot_cls.__new__(snapshot_cls)
        snapshot.__dict__.update(self._pickle_state())
        snapshot.__dict__["traces"] = traces
        return snapshot

    def dump(self, filename: str | os.PathLike[str]) -> None:
        """Write the snapshot to a file, in exactly the standard library's format."""
        with open(filename, "wb") as fp:
            pickle.dump(self._as_tracemalloc_object(), fp, pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def load(filename: str | os.PathLike[str]) -> Snapshot:
        """Load a snapshot written by :meth:`dump` or by the standard library."""
        with open(filename, "rb") as fp:
            loaded: Snapshot = _SnapshotUnpickler(fp).load()
        return loaded

    def filter_traces(self, filters: Iterable[BaseFilter]) -> Snapshot:
        """A new snapshot with the traces the filters keep (all of them, copied, when
        ``filters`` is empty)."""
        if not isinstance(filters, Iterable):
            raise TypeError(f"filters must be a list of filters, not {type(filters).__name__}")
        if not filters:
            if "traces" in self.__dict__:
                return Snapshot(self.traces._traces.copy(), self.traceback_limit)
            return Snapshot._from_trace_set(self._trace_set(), self.traceback_limit)
        filters = list(filters)
        include = [f for f in filters if f.inclusive]
        exclude = [f for f in filters if not f.inclusive]
        if all(type(f) in (Filter, DomainFilter) for f in filters):
            # Built-in filters look at the domain and frames only: decide once per
            # distinct (domain, traceback) pair, select the traces in Rust.
            trace_set = self._trace_set()
            keep = [
                _keeps(include, exclude, (domain, 0, frames, None))
                for domain, frames in trace_set.pairs()
            ]
            return Snapshot._from_trace_set(trace_set.select(keep), self.traceback_limit)
        kept = [t for t in self.traces._traces if _keeps(include, exclude, t)]
        return Snapshot(kept, self.traceback_limit)

    def _group_by(self, key_type: str, cumulative: bool) -> dict[Traceback, Statistic]:
        if key_type not in ("traceback", "filename", "lineno"):
            raise ValueError(f"unknown key_type: {key_type!r}")
        if cumulative and key_type not in ("lineno", "filename"):
            raise ValueError(f"cumulative mode cannot by used with key type {key_type!r}")
        groups: dict[Traceback, Statistic] = {}
        for frames, size, count in self._trace_set().statistics(key_type, bool(cumulative)):
            traceback = Traceback(frames)
            groups[traceback] = Statistic(traceback, size, count)
        return groups

    def statistics(self, key_type: KeyType, cumulative: bool = False) -> list[Statistic]:
        """Statistics grouped by ``key_type``, biggest first."""
        # Rust returns the groups already in tracemalloc's order.
        return list(self._group_by(key_type, cumulative).values())

    def compare_to(
        self, old_snapshot: Snapshot, key_type: KeyType, cumulative: bool = False
    ) -> list[StatisticDiff]:
        """What changed since ``old_snapshot``, grouped by ``key_type``, biggest change
        first."""
        new_group = self._group_by(key_type, cumulative)
        old_group = old_snapshot._group_by(key_type, cumulative)
        diffs = _compare_grouped_stats(old_group, new_group)
        diffs.sort(reverse=True, key=StatisticDiff._sort_key)
        return diffs


class _SnapshotUnpickler(pickle.Unpickler):
    """Loads ``tracemalloc.Snapshot`` pickles as memtape snapshots."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "tracemalloc" and name in ("Snapshot", "_Traces"):
            return {"Snapshot": Snapshot, "_Traces": _Traces}[name]
        return super().find_class(module, name)


def take_snapshot() -> Snapshot:
    """Snapshot of the traces of the memory blocks allocated by Python."""
    if not is_tracing():
        raise RuntimeError(
            "the tracemalloc module must be tracing memory allocations to take a snapshot"
        )
    # Like the stdlib, the Snapshot built here is traced; an event recording or a capture
    # keeps only the program's allocations, so it is left out of them.
    hidden = _native._events_or_capture_recording()
    token = _native._own_work_begin() if hidden else None
    try:
        limit = get_traceback_limit()
        if _get_traces is _native._get_traces:
            trace_set = _native._take_trace_set()
            if trace_set is not None:
                return Snapshot._from_trace_set(trace_set, limit)
        return Snapshot(_get_traces(), limit)
    finally:
        if token is not None:
            _native._work_end(token)


def install() -> None:
    """Makes memtape the process's tracer: from now on the standard library's
    ``tracemalloc`` (whether already imported or not, and so ``warnings``' "Object
    allocated at", pytest's warning summary and asyncio's debug mode) answers with
    memtape's traces, and its ``start()``/``stop()`` start and stop memtape's tracer.
    A builtin tracer started by ``-X tracemalloc`` or ``PYTHONTRACEMALLOC`` is stopped
    and memtape keeps tracing with its traceback limit. Calling it again does nothing.
    ``MEMTAPE_TRACEMALLOC=N`` and ``python -m memtape.tracemalloc`` call it for you."""
    _process_tracer.install()
