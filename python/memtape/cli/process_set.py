"""The captures of one ``memtape run --follow-children``: the root's and its children's.

Reports open the root capture (``STEM.mtape``); its children are ``STEM.<pid>.mtape``
beside it with the same ``run_id`` in their metadata. ``--pid PID`` picks one process.

**Combined peak.** The set's peak is the highest *sum* of the processes' live memory at
the same moment, not the sum of their own peaks (which may never coincide). The captures'
clocks are put on one timeline by their start times; each capture's clock advances in
ticks of about a millisecond (coarser on long runs: :attr:`Combined.resolution_ns`), and
within a tick each process counts at its highest.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from memtape import _native
from memtape._child_capture import child_path, stem_of
from memtape.cli.capture_file import fail, open_capture, print_damage_note

# A tick on the common clock: (highest live bytes, live bytes at its end, the process'
# own clock at the end of its last tick counted here).
Tick = tuple[int, int, int]

_CHILD = re.compile(r"\.(\d+)\.mtape$")


@dataclass
class Process:
    """One process of the set and its analyzed capture."""

    path: str
    capture: _native.Capture
    meta: dict[str, Any]

    @cached_property
    def summary(self) -> dict[str, Any]:
        """The capture's ``stats --json`` numbers (made on first use)."""
        return dict(json.loads(self.capture.summary_json(0)))

    @property
    def pid(self) -> int:
        return int(self.meta.get("pid") or 0)

    @property
    def parent_pid(self) -> int | None:
        parent = self.meta.get("parent_pid")
        return None if parent is None else int(parent)

    @property
    def start_method(self) -> str:
        return str(self.meta.get("start_method") or "root")

    @property
    def start_ns(self) -> int:
        return int(self.meta.get("start_time_ns") or 0)

    @property
    def label(self) -> str:
        argv = " ".join(str(a) for a in self.meta.get("argv") or [])
        if len(argv) > 60:
            argv = argv[:57] + "..."
        return f"pid {self.pid} ({self.start_method}) {argv}".rstrip()


def _process(path: str, capture: _native.Capture) -> Process:
    return Process(path, capture, json.loads(capture.metadata_json or "{}"))


@dataclass
class Combined:
    """The set's memory over time on one clock (ns since the root's start)."""

    resolution_ns: int
    #: ``(time_ns, live bytes summed over the processes)`` per tick that saw events.
    series: list[tuple[int, int]]
    peak_bytes: int
    peak_time_ns: int
    #: Each process' live bytes in the peak's tick, by pid.
    peak_by_pid: dict[int, int] = field(default_factory=dict)
    #: Each running process' own clock (ns since its start) at the end of the peak's tick.
    peak_local_ns: dict[int, int] = field(default_factory=dict)


@dataclass
class ProcessSet:
    """The root first, then the children by start time."""

    processes: list[Process]
    #: How the set's reports show import machinery (``--imports``).
    imports: str = "hide"

    def analyze_at(self, p: Process, moment: str) -> _native.Capture:
        """``p``'s capture read again for ``moment`` (a ``time:NS`` spec)."""
        return _native.analyze_capture(p.path, moments=[moment], imports=self.imports)

    @property
    def root(self) -> Process:
        return self.processes[0]

    def combined(self) -> Combined:
        return combine(self.processes)


def children_of(root_path: str, meta: dict[str, Any]) -> list[str]:
    """The child captures beside ``root_path`` that belong to its run (by name; the
    caller checks the run id)."""
    if not meta.get("follow_children"):
        return []
    stem = stem_of(root_path)
    found = []
    for path in glob.glob(glob.escape(stem) + ".*.mtape"):
        m = _CHILD.search(path)
        if m and path == child_path(stem, int(m.group(1))):
            found.append(path)
    return sorted(found)


def open_set(
    command: str,
    path: str,
    pid: int | None = None,
    moments: Sequence[str] = (),
    imports: str = "hide",
) -> ProcessSet:
    """The set whose root is ``path`` (a plain capture is a set of one); with ``pid``,
    only that process. Exits with status 2 when ``pid`` is not in the set. ``imports``:
    how every report of it shows import machinery."""
    if pid is not None:
        alone = _one_process(command, path, pid, moments, imports)
        if alone is not None:
            return ProcessSet([alone], imports)
    root = _process(path, open_capture(command, path, moments if pid is None else (), imports))
    processes = [root]
    run_id = root.meta.get("run_id")
    for child in children_of(path, root.meta):
        try:
            capture = _native.analyze_capture(child, moments=list(moments), imports=imports)
        except (OSError, ValueError) as exc:
            print(f"memtape {command}: skipping {child}: {exc}", file=sys.stderr)
            continue
        print_damage_note(command, child, capture)
        p = _process(child, capture)
        if p.meta.get("run_id") == run_id:
            processes.append(p)
    processes[1:] = sorted(processes[1:], key=lambda p: (p.start_ns, p.pid))
    if pid is None:
        return ProcessSet(processes, imports)
    chosen = [p for p in processes if p.pid == pid]
    if not chosen:
        pids = ", ".join(str(p.pid) for p in processes)
        fail(command, f"no process {pid} in {path} (its processes: {pids})")
    if chosen[0] is not root and moments:
        chosen = [_process(chosen[0].path, open_capture(command, chosen[0].path, moments, imports))]
    return ProcessSet(chosen, imports)


def _one_process(
    command: str, path: str, pid: int, moments: Sequence[str], imports: str
) -> Process | None:
    """Process ``pid``'s capture read alone (not the whole set): the root's, or a child's
    whose name and run id match the root's; else None."""
    try:
        root_meta = json.loads(_native.capture_metadata(path))
        if root_meta.get("pid") == pid:
            return _process(path, open_capture(command, path, moments, imports))
        own = child_path(stem_of(path), pid)
        run_id = root_meta.get("run_id")
        if run_id is None or not os.path.isfile(own):
            return None
        if json.loads(_native.capture_metadata(own)).get("run_id") != run_id:
            return None
    except (OSError, ValueError):
        return None
    return _process(own, open_capture(command, own, moments, imports))


def _ticks_on(p: Process, origin_ns: int, shift: int) -> tuple[dict[int, Tick], int]:
    """``{tick: (max, end, own clock at its end)}`` on the common clock, and the tick of
    the process' end."""
    width, rows = p.capture.ticks
    out: dict[int, Tick] = {}
    offset = p.start_ns - origin_ns
    for index, top, end in rows:
        at = max(0, offset + index * width) >> shift
        old = out.get(at)
        local_end = (index + 1) * width
        out[at] = (top, end, local_end) if old is None else (max(old[0], top), end, local_end)
    duration = int(p.summary.get("duration_ns") or 0)
    last = max(out) if out else 0
    return out, max(last, max(0, offset + duration) >> shift)


def combine(processes: Sequence[Process]) -> Combined:
    """Adds the processes' live memory on one clock; see the module documentation."""
    origin = processes[0].start_ns
    width = max(p.capture.ticks[0] for p in processes)
    shift = width.bit_length() - 1
    ticks = [_ticks_on(p, origin, shift) for p in processes]
    moments = sorted({t for table, _ in ticks for t in table})
    current = [0] * len(processes)
    series: list[tuple[int, int]] = []
    best, best_t, best_split = 0, 0, [0] * len(processes)
    for t in moments:
        values = []
        for i, (table, last) in enumerate(ticks):
            hit = table.get(t)
            if t > last:
                current[i] = 0
            values.append(hit[0] if hit is not None else current[i])
            if hit is not None:
                current[i] = hit[1]
        total = sum(values)
        series.append((t << shift, total))
        if total > best:
            best, best_t, best_split = total, t, values
    running = {
        p.pid: _local_end(p, origin, table, best_t, shift)
        for p, (table, last) in zip(processes, ticks, strict=True)
        if p.start_ns - origin < (best_t + 1) << shift and best_t <= last
    }
    return Combined(
        resolution_ns=1 << shift,
        series=series,
        peak_bytes=best,
        peak_time_ns=best_t << shift,
        peak_by_pid={p.pid: v for p, v in zip(processes, best_split, strict=True) if v},
        peak_local_ns=running,
    )


def _local_end(p: Process, origin_ns: int, table: dict[int, Tick], t: int, shift: int) -> int:
    """``p``'s own clock at the end of common tick ``t``: the end of its own last tick
    counted in ``t`` when there is one (so that tick's events are in)."""
    hit = table.get(t)
    if hit is not None:
        return hit[2]
    return max(1, ((t + 1) << shift) - (p.start_ns - origin_ns))


def moment_in(p: Process, combined: Combined) -> str | None:
    """The ``time:NS`` moment of ``p`` at the combined peak (the end of its tick there),
    or None when ``p`` was not running then."""
    local = combined.peak_local_ns.get(p.pid)
    return None if local is None else f"time:{local}"


def add_pid_option(parser: Any) -> None:
    """``--pid PID`` for a reading command."""
    parser.add_argument(
        "--pid",
        type=int,
        default=None,
        metavar="PID",
        help="with a --follow-children capture: only this process (default: all combined)",
    )


def exit_text(p: Process) -> str:
    run = p.summary.get("run") or {}
    if run.get("cut_short"):
        return "cut short"
    kind, code = run.get("exit"), run.get("exit_code")
    return f"{kind} {code}" if kind and kind not in ("normal", "interpreter-exit") else str(kind)
