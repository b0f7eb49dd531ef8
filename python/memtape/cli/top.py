"""Top allocation sites by line, file or traceback, at the peak or at the end.

For a --follow-children capture: summed over every process, at the combined peak (each
process' live set at that moment) or at the end; --pid shows one process."""

from __future__ import annotations

import json

from memtape.cli import process_set as ps
from memtape.cli import process_set_sites as pss
from memtape.cli.command_parser import command_parser
from memtape.cli.import_option import add_imports_option
from memtape.cli.site_options import add_site_options


def main(argv: list[str]) -> int:
    p = command_parser("top", __doc__ or "")
    p.add_argument("file", help="a capture file from memtape run")
    add_site_options(p)
    p.add_argument(
        "--at",
        choices=("peak", "end"),
        default="peak",
        help="memory live at the peak, or at the end: never freed (default: peak)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    ps.add_pid_option(p)
    add_imports_option(p)
    args = p.parse_args(argv)
    pset = ps.open_set("top", args.file, args.pid, imports=args.imports)
    if len(pset.processes) > 1:
        return _combined(pset, args.by, args.at, args.limit, args.json)
    capture = pset.root.capture
    if args.json:
        data = json.loads(capture.sites_json(args.by, args.at, args.limit))
        split = capture.by_source(args.at)
        if split is not None:
            data["by_source"] = dict(split)
        print(json.dumps(data, separators=(",", ":")))
    else:
        print(capture.top_text(args.by, args.at, args.limit))
        split_text = capture.by_source_text(args.at)
        if split_text is not None:
            print(f"By source: {split_text}")
    return 0


def _combined(pset: ps.ProcessSet, by: str, at: str, limit: int, as_json: bool) -> int:
    sites = pss.combined_sites(pset, by, at)
    if as_json:
        data = {
            "processes": [p.pid for p in pset.processes],
            "at": "combined peak" if at == "peak" else "end",
            "total_bytes": sum(s.bytes for s in sites),
            "sites": pss.sites_json(sites, limit),
        }
        print(json.dumps(data, separators=(",", ":")))
        return 0
    when = "at the combined peak" if at == "peak" else "never freed (live at each one's end)"
    print(f"All {len(pset.processes)} processes, {when}:")
    print(pss.sites_text(sites, limit))
    return 0
