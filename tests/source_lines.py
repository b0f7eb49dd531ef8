"""Line numbers of marked source lines, so tests never hard-code line numbers.

A marked line ends with a comment ``# @tm:<tag>``; ``line_of(path, tag)`` returns its
1-based number and fails loudly when the tag is missing or used twice.
"""

from __future__ import annotations

import functools
import os

MARK_PREFIX = "# @tm:"


@functools.cache
def _marks(path: str) -> dict[str, list[int]]:
    marks: dict[str, list[int]] = {}
    with open(path, encoding="utf-8") as source:
        for number, text in enumerate(source, start=1):
            _, sep, tag = text.rstrip().rpartition(MARK_PREFIX)
            if sep and tag and " " not in tag:
                marks.setdefault(tag, []).append(number)
    return marks


def line_of(path: str | os.PathLike[str], tag: str) -> int:
    """The line number of the line in ``path`` marked ``# @tm:<tag>``."""
    hits = _marks(os.fspath(path)).get(tag, [])
    if len(hits) != 1:
        raise LookupError(f"marker {MARK_PREFIX}{tag} occurs {len(hits)} times in {path}")
    return hits[0]


def site(path: str | os.PathLike[str], tag: str) -> tuple[str, int]:
    """``(filename, lineno)`` of a marked line, the shape of a tracemalloc frame."""
    return (os.fspath(path), line_of(path, tag))
