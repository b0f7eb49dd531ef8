"""The ``limit_memory`` and ``limit_leaks`` markers: what they ask, and the failure
messages naming the sites responsible."""

from __future__ import annotations

import os
import unittest
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import _pytest
import pluggy
import pytest

import memtape
from memtape.byte_size import format_size
from memtape.pytest_plugin.measure import BodyMemory, Site
from memtape.pytest_plugin.sizes import parse_size

# Frames of these packages run the test (pytest, pluggy, unittest, memtape): a site's
# stack is shown from its innermost frame down to the first of them.
_MACHINERY = tuple(
    os.path.dirname(m.__file__) + os.sep
    for m in (_pytest, pluggy, unittest, memtape)
    if m.__file__ is not None
)


class StackFrame(NamedTuple):
    """One frame of a leaking stack, as ``filter_fn`` sees it."""

    function: str
    filename: str
    lineno: int


@dataclass(frozen=True)
class Stack:
    """A leaking stack, as ``filter_fn`` sees it: ``frames`` newest first."""

    frames: tuple[StackFrame, ...]
    bytes: int
    count: int


@dataclass(frozen=True)
class MemoryLimit:
    """``limit_memory(limit)``: the body's peak must stay at or under ``limit``."""

    limit: int


@dataclass(frozen=True)
class LeakLimit:
    """``limit_leaks(limit, filter_fn=None, warmups=0, repeat=1)``: no stack may keep more
    than ``limit`` per run of the body, after ``warmups`` unmeasured runs, averaged over
    ``repeat`` measured runs."""

    limit: int
    filter_fn: Callable[[Stack], bool] | None
    warmups: int
    repeat: int


class MarkerError(ValueError):
    """A limit marker given arguments it does not take: the message names the test, the
    marker as written, what is wrong and what the marker takes."""


_TAKES = {
    "limit_memory": "limit_memory takes one size: bytes (1024) or a string like '24 MB'",
    "limit_leaks": "limit_leaks takes one size (bytes, or a string like '1 MB') and "
    "optionally filter_fn=a callable, warmups=an int >= 0, repeat=an int >= 1",
}


def _marker_error(item: pytest.Item, mark: pytest.Mark, reason: str) -> MarkerError:
    written = ", ".join([*map(repr, mark.args), *(f"{k}={v!r}" for k, v in mark.kwargs.items())])
    return MarkerError(f"{item.nodeid}: @pytest.mark.{mark.name}({written}): {reason}")


def _size_of(item: pytest.Item, mark: pytest.Mark, keywords: tuple[str, ...] = ()) -> int:
    """The marker's one positional argument, a size; a MarkerError for anything else."""
    unknown = sorted(set(mark.kwargs) - set(keywords))
    if unknown:
        reason = f"unknown keyword argument {unknown[0]!r}; {_TAKES[mark.name]}"
        raise _marker_error(item, mark, reason)
    if len(mark.args) != 1:
        given = f"{len(mark.args)} given" if mark.args else "no size given"
        reason = f"{given}; {_TAKES[mark.name]}"
        raise _marker_error(item, mark, reason)
    try:
        return parse_size(mark.args[0])
    except ValueError as exc:
        raise _marker_error(item, mark, str(exc)) from None


def memory_limit(item: pytest.Item, default: int | None, *, marker: bool) -> MemoryLimit | None:
    """The test's ``limit_memory`` when ``marker`` (memtape enforces the markers), else
    ``default``; a test with the marker has its own limit and never gets ``default``."""
    mark = item.get_closest_marker("limit_memory")
    if mark is None:
        return None if default is None else MemoryLimit(default)
    if not marker:
        return None
    return MemoryLimit(_size_of(item, mark))


def leak_limit(item: pytest.Item) -> LeakLimit | None:
    mark = item.get_closest_marker("limit_leaks")
    if mark is None:
        return None
    limit = _size_of(item, mark, ("filter_fn", "warmups", "repeat"))
    warmups, repeat = mark.kwargs.get("warmups", 0), mark.kwargs.get("repeat", 1)
    for name, value, least in (("warmups", warmups, 0), ("repeat", repeat, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise _marker_error(item, mark, f"{name} must be an int >= {least}, not {value!r}")
    filter_fn = mark.kwargs.get("filter_fn")
    if filter_fn is not None and not callable(filter_fn):
        raise _marker_error(item, mark, f"filter_fn must be callable, not {filter_fn!r}")
    return LeakLimit(limit, filter_fn, warmups, repeat)


def stack_lines(site: Site, frames: int) -> list[str]:
    """The site's stack, innermost first, down to the test runner's frames."""
    own = 0
    while own < len(site.frames) and not site.frames[own][0].startswith(_MACHINERY):
        own += 1
    shown = site.frames[: max(1, min(own, frames))]
    lines = [f"        {function} at {filename}:{line}" for filename, function, line in shown]
    if len(site.frames) > len(shown):
        lines.append(f"        ... {len(site.frames) - len(shown)} more frame(s)")
    return lines


def _notable(sites: tuple[Site, ...], total: int) -> list[Site]:
    """The top sites, without those under 1% of ``total`` (the runner's own small
    objects)."""
    return [s for s in sites if s.bytes * 100 >= total][:5]


def check_memory(limit: MemoryLimit, body: BodyMemory, frames: int) -> str | None:
    """The failure message, or None when the peak is within the limit."""
    if body.peak <= limit.limit:
        return None
    lines = [
        f"Test was limited to {format_size(limit.limit)} but its peak was "
        f"{format_size(body.peak)}; the top allocation sites at the peak:"
    ]
    for site in _notable(body.peak_sites, body.peak):
        lines.append(f"    - {format_size(site.bytes)} in {site.count} block(s) allocated here:")
        lines.extend(stack_lines(site, frames))
    return "\n".join(lines)


def check_leaks(limit: LeakLimit, body: BodyMemory, frames: int) -> str | None:
    """The failure message, or None when no stack leaked more than the limit per run."""
    offenders: list[Stack] = []
    for site in body.leak_sites:
        per_run = site.bytes // limit.repeat
        if per_run <= limit.limit:
            continue
        stack = Stack(
            tuple(StackFrame(fn, file, line) for file, fn, line in site.frames), per_run, site.count
        )
        if limit.filter_fn is None or limit.filter_fn(stack):
            offenders.append(stack)
    if not offenders:
        return None
    runs = f" per run (over {limit.repeat} runs)" if limit.repeat > 1 else ""
    lines = [
        f"Test was allowed to leak {format_size(limit.limit)} per stack{runs}, "
        f"but {len(offenders)} stack(s) leaked more:"
    ]
    for stack in offenders[:5]:
        lines.append(f"    - {format_size(stack.bytes)}{runs} leaked from here:")
        site = Site(
            tuple((f.filename, f.function, f.lineno) for f in stack.frames),
            stack.bytes,
            stack.count,
        )
        lines.extend(stack_lines(site, frames))
    return "\n".join(lines)
