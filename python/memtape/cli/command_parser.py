"""The argparse set-up every ``memtape`` command shares: ``-h``/``--help`` and
``-V``/``--version``, help printed as written (plain text), and the checked numbers and
moments its options take. A bad value is a usage error: the command's usage line, one
line naming the option and what it takes, exit status 2."""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Callable

# What a count beyond any real number of sites or events stands for: all of them. A
# larger count asks for the same thing, so it is taken as this one (the native side
# takes at most a 64-bit size).
ALL = sys.maxsize


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The description and epilog as written; an option's help wrapped at spaces only,
    so that a name like --follow-children or memtape-NAME-PID.mtape stays whole."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


def command_parser(command: str, description: str) -> argparse.ArgumentParser:
    """The parser of ``memtape COMMAND``, with ``--version`` (``--help`` is argparse's)."""
    parser = argparse.ArgumentParser(
        prog=f"memtape {command}",
        description=description,
        formatter_class=HelpFormatter,
    )
    add_version(parser)
    return parser


def add_version(parser: argparse.ArgumentParser) -> None:
    from memtape import __version__

    parser.add_argument(
        "-V",
        "--version",
        action="version",
        version=f"memtape {__version__}",
        help="print memtape's version and exit",
    )


def whole_number(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An option's type: a whole number from ``minimum`` to ``maximum``, both included.
    Without ``maximum`` it is a count: any larger count means all, as :data:`ALL` does."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum}, not {value}")
        return min(value, ALL)

    parse.__name__ = "whole number"
    return parse
