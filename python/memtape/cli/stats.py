"""Totals, the peak and when it happened, and the top allocation sites at the peak.

For a --follow-children capture: every process combined (the combined peak is the
highest sum of their live memory at one moment), then each process; --pid shows one."""

from __future__ import annotations

import json
from typing import Any

from memtape.byte_size import format_size
from memtape.cli import process_set as ps
from memtape.cli import process_set_sites as pss
from memtape.cli.attach_note import attach_note, attached_info, census_lines
from memtape.cli.command_parser import command_parser, whole_number
from memtape.cli.import_option import add_imports_option


def main(argv: list[str]) -> int:
    p = command_parser("stats", __doc__ or "")
    p.add_argument("file", help="a capture file from memtape run")
    p.add_argument(
        "--limit",
        type=whole_number(0),
        default=10,
        metavar="N",
        help="top sites to list (default: 10)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    ps.add_pid_option(p)
    add_imports_option(p)
    args = p.parse_args(argv)
    pset = ps.open_set("stats", args.file, args.pid, imports=args.imports)
    capture = pset.root.capture
    if len(pset.processes) > 1:
        return _combined(pset, args.limit, args.json)
    attached = attached_info(capture)
    if args.json:
        if attached is None:
            print(capture.summary_json(args.limit))
            return 0
        data = json.loads(capture.summary_json(args.limit))
        data["attached"] = attached | {"note": attach_note(attached)}
        print(json.dumps(data, separators=(",", ":")))
        return 0
    print(capture.stats_text())
    if attached is not None:
        print(f"\nNote: {attach_note(attached)}.")
        for line in census_lines(attached):
            print(line)
    print("\nTop allocation sites at the peak:")
    print(capture.top_text("lineno", "peak", args.limit))
    return 0


def _totals(pset: ps.ProcessSet) -> dict[str, int]:
    keys = ("allocs", "frees", "bytes_allocated", "bytes_freed")
    return {k: sum(int(p.summary["totals"][k]) for p in pset.processes) for k in keys}


def _combined(pset: ps.ProcessSet, limit: int, as_json: bool) -> int:
    combined = pset.combined()
    sites = pss.combined_sites(pset, "lineno", "peak", combined)
    sum_of_peaks = sum(int(p.summary["peak"]["bytes"]) for p in pset.processes)
    totals = _totals(pset)
    if as_json:
        data: dict[str, Any] = json.loads(pset.root.capture.summary_json(limit))
        data["combined"] = {
            "processes": len(pset.processes),
            "peak": {
                "bytes": combined.peak_bytes,
                "time_ns": combined.peak_time_ns,
                "resolution_ns": combined.resolution_ns,
                "by_pid": {str(k): v for k, v in combined.peak_by_pid.items()},
                "meaning": "highest sum of the processes' live bytes at one moment",
            },
            "sum_of_peaks": sum_of_peaks,
            "totals": totals,
            "top": pss.sites_json(sites, limit),
        }
        data["processes"] = [
            {
                "pid": p.pid,
                "parent_pid": p.parent_pid,
                "start_method": p.start_method,
                "path": p.path,
                "argv": p.meta.get("argv") or [],
                "peak": p.summary["peak"],
                "totals": p.summary["totals"],
                "end": p.summary["end"],
                "duration_ns": p.summary.get("duration_ns"),
                "run": p.summary.get("run"),
            }
            for p in pset.processes
        ]
        print(json.dumps(data, separators=(",", ":")))
        return 0
    root = pset.root
    print(f"{len(pset.processes)} processes recorded by memtape run --follow-children")
    print(
        f"Combined peak:  {format_size(combined.peak_bytes)} at "
        f"{combined.peak_time_ns / 1e9:.3f} s (the highest sum of the processes' live "
        f"memory at one moment, {combined.resolution_ns / 1e6:.1f} ms ticks)"
    )
    print(f"Sum of peaks:   {format_size(sum_of_peaks)} (each process at its own peak)")
    print(
        f"Allocated:      {format_size(totals['bytes_allocated'])} in "
        f"{totals['allocs']:,} allocations; freed {format_size(totals['bytes_freed'])}"
    )
    print()
    rows = [("PID", "PARENT", "STARTED AS", "PEAK", "AT COMBINED PEAK", "ALLOCATED", "EXIT")]
    for p in pset.processes:
        rows.append(
            (
                str(p.pid),
                "-" if p.parent_pid is None else str(p.parent_pid),
                p.start_method,
                format_size(int(p.summary["peak"]["bytes"])),
                format_size(combined.peak_by_pid.get(p.pid, 0)),
                format_size(int(p.summary["totals"]["bytes_allocated"])),
                ps.exit_text(p),
            )
        )
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    print("\nTop allocation sites at the combined peak (all processes):")
    print(pss.sites_text(sites, limit))
    print(f"\nOne process: memtape stats {root.path} --pid PID")
    return 0
