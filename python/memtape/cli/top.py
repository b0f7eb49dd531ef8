"""``memtape top FILE``: top allocation sites by line, file or traceback."""

from __future__ import annotations

import argparse
import json

from memtape.cli.capture_file import open_capture


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="memtape top", description=__doc__)
    p.add_argument("file", help="a capture file from memtape run")
    p.add_argument("--by", choices=("lineno", "filename", "traceback"), default="lineno")
    p.add_argument("--limit", type=int, default=10, help="rows to show (default 10)")
    p.add_argument(
        "--at",
        choices=("peak", "end"),
        default="peak",
        help="memory live at the peak (default) or at the end (never freed)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    args = p.parse_args(argv)
    capture = open_capture("top", args.file)
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
