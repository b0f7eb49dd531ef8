"""``--by`` and ``--limit``: how the commands that list allocation sites group and cut
them (``top``, ``diff``)."""

from __future__ import annotations

import argparse

from memtape.cli.command_parser import whole_number


def add_site_options(parser: argparse.ArgumentParser) -> None:
    """Adds ``--by lineno|filename|traceback`` and ``--limit N`` to a command's parser."""
    parser.add_argument(
        "--by",
        choices=("lineno", "filename", "traceback"),
        default="lineno",
        help="group the memory by line, by file or by whole traceback (default: lineno)",
    )
    parser.add_argument(
        "--limit", type=whole_number(0), default=10, metavar="N", help="rows to show (default: 10)"
    )
