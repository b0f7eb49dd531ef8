"""Replays a memory_viz snapshot the way PyTorch's viewer does, and says what would break.

MemoryViz.js's "Allocator State History" starts from the snapshot's ``segments`` (the
final state) and undoes the trace backwards to the selected event; every block live at
that point must lie inside a segment, or the page throws (``reading 'occupied'``). Its
timelines match ``alloc`` and ``free_completed`` by address. ``problems`` follows those
rules (research/torch_snapshot.md section 2; MemoryViz.js ``simulate_memory``) over every
point of every device's trace, and names the event where each problem appears, so a
failure says which event broke the snapshot.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

ADDRESSED = {
    "alloc",
    "free_requested",
    "free_completed",
    "segment_alloc",
    "segment_free",
    "segment_map",
    "segment_unmap",
}


@dataclass
class Segment:
    addr: int
    size: int

    @property
    def end(self) -> int:
        return self.addr + self.size


class SegmentMap:
    """Segments by address, kept sorted (as the viewer's binary search needs)."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.segments: list[Segment] = []

    def add(self, segment: Segment) -> str | None:
        i = bisect.bisect_left(self.starts, segment.addr)
        overlap = None
        if i < len(self.segments) and self.segments[i].addr < segment.end:
            overlap = self.segments[i]
        elif i > 0 and self.segments[i - 1].end > segment.addr:
            overlap = self.segments[i - 1]
        self.starts.insert(i, segment.addr)
        self.segments.insert(i, segment)
        if overlap is not None:
            return (
                f"segment {segment.addr:#x}+{segment.size} "
                f"overlaps {overlap.addr:#x}+{overlap.size}"
            )
        return None

    def remove_at(self, addr: int) -> Segment | None:
        i = bisect.bisect_left(self.starts, addr)
        if i < len(self.starts) and self.starts[i] == addr:
            del self.starts[i]
            return self.segments.pop(i)
        return None

    def holding(self, addr: int) -> Segment | None:
        i = bisect.bisect_right(self.starts, addr) - 1
        if i >= 0 and addr < self.segments[i].end:
            return self.segments[i]
        return None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _entry_problems(where: str, entry: dict[str, Any]) -> Iterator[str]:
    action = entry.get("action")
    if not isinstance(action, str):
        yield f"{where}: no action"
        return
    keys = ("size", "addr") if action in ADDRESSED else ("size",) if action == "oom" else ()
    for key in keys:
        value = entry.get(key)
        if not _is_int(value) or value < 0 or value >= 2**53:
            yield f"{where}: {key}={value!r} is not an int the viewer reads exactly"
    if not _is_int(entry.get("time_us")):
        yield f"{where}: time_us={entry.get('time_us')!r} (the tooltip shows 'Invalid Date')"
    for frame in entry.get("frames", []):
        if not (isinstance(frame.get("name"), str) and isinstance(frame.get("filename"), str)):
            yield f"{where}: frame {frame!r} has a name or filename that is not a string"
        if not _is_int(frame.get("line")):
            yield f"{where}: frame {frame!r} has no int line"
    for key, value in entry.items():
        if isinstance(value, float) and not math.isfinite(value):
            yield f"{where}: {key} is {value}"


def merged_trace(trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The trace as the viewer lists it: an adjacent free_requested + free_completed at the
    same address becomes one ``free``."""
    out: list[dict[str, Any]] = []
    i = 0
    while i < len(trace):
        entry = trace[i]
        if (
            entry["action"] == "free_requested"
            and i + 1 < len(trace)
            and trace[i + 1]["action"] == "free_completed"
            and trace[i + 1].get("addr") == entry.get("addr")
        ):
            out.append({**entry, "action": "free", "_index": i})
            i += 2
            continue
        out.append({**entry, "_index": i})
        i += 1
    return out


def _final_state(
    snapshot: dict[str, Any], device: int, problems: list[str]
) -> tuple[SegmentMap, dict[int, int]]:
    segments = SegmentMap()
    blocks: dict[int, int] = {}
    for n, seg in enumerate(snapshot["segments"]):
        if seg.get("device") != device:
            continue
        where = f"device {device}, segments[{n}] at {seg['address']:#x}"
        if (err := segments.add(Segment(seg["address"], seg["total_size"]))) is not None:
            problems.append(f"{where}: {err}")
        addr = seg["address"]
        for b in seg["blocks"]:
            if b["address"] != addr:
                problems.append(f"{where}: block at {b['address']:#x}, expected {addr:#x}")
            if "frames" in b and not _is_int(b.get("requested_size")):
                problems.append(f"{where}: a block with frames needs requested_size (NaN)")
            if b["state"] in ("active_allocated", "active_pending_free"):
                blocks[addr] = b["size"]
            addr += b["size"]
        if addr != seg["address"] + seg["total_size"]:
            problems.append(f"{where}: blocks sum to {addr - seg['address']}, not total_size")
    return segments, blocks


def _check_block(where: str, segments: SegmentMap, addr: int, size: int) -> str | None:
    seg = segments.holding(addr)
    if seg is None:
        return f"{where}: block {addr:#x}+{size} lies in no segment (the viewer throws)"
    if addr + size > seg.end:
        return f"{where}: block {addr:#x}+{size} runs past its segment {seg.addr:#x}+{seg.size}"
    return None


def _undo(
    where: str, event: dict[str, Any], segments: SegmentMap, blocks: dict[int, int]
) -> Iterator[str]:
    """Undoes one event as MemoryViz.js's simulate_memory does, yielding what breaks."""
    action, addr = event["action"], event.get("addr")
    if action in ("free", "free_completed"):
        if addr in blocks:
            yield f"{where}: undoing it revives block {addr:#x}, which is already live"
        blocks[addr] = event["size"]
        if (err := _check_block(where, segments, addr, event["size"])) is not None:
            yield err
    elif action == "free_requested":
        if addr not in blocks:
            yield f"{where}: a free_requested with no block to mark (the viewer throws)"
    elif action == "alloc":
        if blocks.pop(addr, None) is None:
            yield f"{where}: the block it allocates is not live after it (segments disagree)"
    elif action in ("segment_free", "segment_unmap"):
        if (err := segments.add(Segment(addr, event["size"]))) is not None:
            yield f"{where}: undoing it: {err}"
    elif action in ("segment_alloc", "segment_map"):
        seg = segments.remove_at(addr)
        if seg is None:
            yield f"{where}: no segment at {addr:#x} to undo (the viewer removes another one)"
            return
        for block, size in blocks.items():
            if seg.addr <= block < seg.end:
                yield f"{where}: block {block:#x}+{size} is still live in the segment it undoes"


def _forward(where_of: Any, trace: list[dict[str, Any]]) -> Iterator[str]:
    """Timeline rules, forward: an address is allocated again only after its free."""
    open_allocs: set[int] = set()
    for entry in trace:
        action, addr = entry["action"], entry.get("addr")
        if action == "alloc":
            if addr in open_allocs:
                yield f"{where_of(entry)}: alloc at {addr:#x} while its last alloc is still open"
            open_allocs.add(addr)
        elif action in ("free", "free_completed"):
            open_allocs.discard(addr)


def problems(snapshot: dict[str, Any]) -> list[str]:
    """Everything in ``snapshot`` that would break a view of PyTorch's viewer, or show
    NaN or a wrong state, each naming its device and event; empty when it is consistent."""
    found: list[str] = []
    traces = snapshot["device_traces"]
    devices = set(range(len(traces))) | {s.get("device") for s in snapshot["segments"]}
    for seg in snapshot["segments"]:
        if not _is_int(seg.get("device")) or not 0 <= seg["device"] < max(len(traces), 1):
            found.append(
                f"segment at {seg.get('address')}: device {seg.get('device')!r} has no trace list"
            )
    for device in sorted(d for d in devices if _is_int(d)):
        raw = traces[device] if device < len(traces) else []
        for i, entry in enumerate(raw):
            found.extend(_entry_problems(f"device {device}, entry #{i}", entry))
        trace = merged_trace(raw)

        def where(entry: dict[str, Any], device: int = device) -> str:
            addr = entry.get("addr")
            shown = f" {addr:#x}" if _is_int(addr) else ""
            return f"device {device}, entry #{entry['_index']} ({entry['action']}{shown})"

        found.extend(_forward(where, trace))
        segments, blocks = _final_state(snapshot, device, found)
        for addr, size in blocks.items():
            if (
                err := _check_block(f"device {device}, final state", segments, addr, size)
            ) is not None:
                found.append(err)
        for entry in reversed(trace):
            found.extend(_undo(where(entry), entry, segments, blocks))
    return found
