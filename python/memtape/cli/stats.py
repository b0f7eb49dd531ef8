"""``memtape stats FILE``: totals, the peak and when it happened, top sites."""

from __future__ import annotations

import argparse

from memtape.cli.capture_file import open_capture


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="memtape stats", description=__doc__)
    p.add_argument("file", help="a capture file from memtape run")
    p.add_argument("--limit", type=int, default=10, help="top sites to list (default 10)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    args = p.parse_args(argv)
    capture = open_capture("stats", args.file)
    if args.json:
        print(capture.summary_json(args.limit))
        return 0
    print(capture.stats_text())
    print("\nTop allocation sites at the peak:")
    print(capture.top_text("lineno", "peak", args.limit))
    return 0
