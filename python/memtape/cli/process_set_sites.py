"""Sites summed over the processes of a ``--follow-children`` set: at the combined peak
(each process' live set at that moment) or at the end (what each never freed)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memtape.byte_size import format_size
from memtape.cli.process_set import Combined, ProcessSet, moment_in

Frames = tuple[tuple[str, str, int], ...]


@dataclass
class SetSite:
    """A site summed over the processes, with each process' share."""

    frames: Frames
    bytes: int
    count: int
    by_pid: dict[int, int]


def combined_sites(
    pset: ProcessSet, by: str, at: str, combined: Combined | None = None
) -> list[SetSite]:
    """The sites live at the combined peak (``at="peak"``: each process' live set at
    that moment) or never freed (``at="end"``), summed over the processes, biggest
    first."""
    merged: dict[Frames, SetSite] = {}
    if at == "peak" and combined is None:
        combined = pset.combined()
    for p in pset.processes:
        capture, where = p.capture, "end"
        if at == "peak":
            assert combined is not None
            moment = moment_in(p, combined)
            if moment is None:
                continue
            capture, where = pset.analyze_at(p, moment), "moment:0"
        for frames, nbytes, count in capture.sites(by, where, 1 << 62):
            site = merged.setdefault(frames, SetSite(frames, 0, 0, {}))
            site.bytes += nbytes
            site.count += count
            site.by_pid[p.pid] = site.by_pid.get(p.pid, 0) + nbytes
    return sorted(merged.values(), key=lambda s: (-s.bytes, s.frames))


def site_location(frames: Frames) -> str:
    if not frames:
        return "[no Python frame]"
    filename, function, line = frames[0]
    return f"{filename}:{line} in {function}"


def sites_text(sites: Sequence[SetSite], limit: int) -> str:
    """A terminal table of combined sites with the pids holding them."""
    total = sum(s.bytes for s in sites) or 1
    rows = [("#", "Size", "Share", "Count", "Processes", "Location")]
    for i, s in enumerate(sites[:limit], 1):
        pids = ",".join(str(pid) for pid, b in sorted(s.by_pid.items()) if b)
        rows.append(
            (
                str(i),
                format_size(s.bytes),
                f"{100 * s.bytes / total:.1f}%",
                f"{s.count:,}",
                pids,
                site_location(s.frames),
            )
        )
    widths = [max(len(r[c]) for r in rows) for c in range(5)]
    lines = [
        "  ".join(r[c].rjust(widths[c]) if c != 4 else r[c].ljust(widths[c]) for c in range(5))
        + "  "
        + r[5]
        for r in rows
    ]
    rest = sites[limit:]
    if rest:
        lines.append(
            f"... and {len(rest):,} more sites ({format_size(sum(s.bytes for s in rest))})"
        )
    return "\n".join(lines)


def sites_json(sites: Sequence[SetSite], limit: int) -> list[dict[str, Any]]:
    return [
        {
            "bytes": s.bytes,
            "count": s.count,
            "by_pid": {str(pid): b for pid, b in sorted(s.by_pid.items())},
            "frames": [{"filename": f, "function": n, "line": ln} for f, n, ln in s.frames],
        }
        for s in sites[:limit]
    ]
