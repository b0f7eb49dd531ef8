"""The options of ``%%memtape`` and ``%memtape_top``, split as a shell would (a ``#``
starts a comment)."""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import dataclass
from typing import Any, NoReturn

from IPython.core.error import UsageError


class _Parser(argparse.ArgumentParser):
    """Mistakes become IPython's UsageError (a one-line message), not an exit."""

    def __init__(self, **kwargs: Any) -> None:
        # The usage goes into a UsageError's plain text: never the terminal colours that
        # argparse adds from 3.14 on.
        if sys.version_info >= (3, 14):
            kwargs.setdefault("color", False)
        super().__init__(**kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}\n{self.format_usage().rstrip()}")


def _whole(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


@dataclass(frozen=True)
class CellOptions:
    """What ``%%memtape`` was asked to do."""

    native_heap: bool
    top: int
    save: str | None


@dataclass(frozen=True)
class TopOptions:
    """What ``%memtape_top`` was asked to show."""

    limit: int
    by: str
    at: str


_CELL = _Parser(prog="%%memtape", add_help=False)
_CELL.add_argument(
    "--no-native-heap",
    action="store_true",
    help="record the Python heap only (by default native malloc/mmap too)",
)
_CELL.add_argument("--top", type=_whole, default=10, metavar="N", help="sites in the text summary")
_CELL.add_argument(
    "--save", metavar="PATH", help="keep the capture in PATH (replaced) for the memtape CLI"
)

_TOP = _Parser(prog="%memtape_top", add_help=False)
_TOP.add_argument("limit", nargs="?", type=_whole, default=10, metavar="N")
_TOP.add_argument("--by", choices=("lineno", "filename", "traceback"), default="lineno")
_TOP.add_argument("--at", choices=("peak", "end"), default="peak")

CELL_USAGE = _CELL.format_help()
TOP_USAGE = _TOP.format_help()


def cell_options(line: str) -> CellOptions:
    args = _CELL.parse_args(shlex.split(line, comments=True))
    return CellOptions(native_heap=not args.no_native_heap, top=args.top, save=args.save)


def top_options(line: str) -> TopOptions:
    args = _TOP.parse_args(shlex.split(line, comments=True))
    return TopOptions(limit=args.limit, by=args.by, at=args.at)
