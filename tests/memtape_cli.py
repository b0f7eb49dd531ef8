"""Driving the ``memtape`` command from tests: record a program, read the capture.

``memtape(*args)`` runs ``python -m memtape ARGS`` in a child of the test interpreter
(with a hard timeout, see ``child_python``); ``record(...)`` writes a program to a file
and records it with ``memtape run -q -o``; ``read_json(...)`` runs a reading command with
``--json`` and parses what it printed. ``Site`` is one row of a ``--json`` site list.

``capture_blocks(data)`` splits a capture's bytes into the file header and its blocks
(docs/capture-format.md), so tests can cut a file at a block boundary.
"""

from __future__ import annotations

import importlib.util
import json
import os
import struct
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from child_python import describe, run_python

TIMEOUT_S = 60.0


def _package_dir() -> Path:
    spec = importlib.util.find_spec("memtape")
    assert spec is not None and spec.origin is not None, "memtape is not importable"
    return Path(spec.origin).resolve().parent


PACKAGE_DIR = _package_dir()

FILE_HEADER_FIXED = 16  # magic, version, flags, metadata length
BLOCK_HEADER = 20


def memtape(
    *args: str | os.PathLike[str],
    cwd: str | os.PathLike[str] | None = None,
    env: dict[str, str] | None = None,
    timeout: float = TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    """``python -m memtape ARGS`` (the interpreter running the tests)."""
    return run_python(["-m", "memtape", *map(os.fspath, args)], cwd=cwd, env=env, timeout=timeout)


def python(
    *args: str | os.PathLike[str],
    cwd: str | os.PathLike[str] | None = None,
    env: dict[str, str] | None = None,
    timeout: float = TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    """Plain ``python ARGS``, to compare memtape's run of a program with python's."""
    return run_python([*map(os.fspath, args)], cwd=cwd, env=env, timeout=timeout)


def write_program(path: Path, source: str) -> Path:
    """Writes dedented ``source`` to ``path`` and returns it."""
    path.write_text(textwrap.dedent(source).lstrip("\n"), encoding="utf-8")
    return path


def record(
    script: Path,
    capture: Path,
    *args: str,
    options: tuple[str, ...] = (),
    expect_exit: int = 0,
    cwd: str | os.PathLike[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``memtape run -q -o CAPTURE OPTIONS SCRIPT ARGS``; fails the test on another exit."""
    result = memtape("run", "-q", "-o", capture, *options, script, *args, cwd=cwd)
    assert result.returncode == expect_exit, describe(result)
    assert capture.is_file(), describe(result)
    return result


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    """``result``, after checking it exited 0 without a Python traceback."""
    assert result.returncode == 0, describe(result)
    assert "Traceback (most recent call last)" not in result.stderr, describe(result)
    return result


def read_json(*args: str | os.PathLike[str]) -> Any:
    """``memtape ARGS --json``, parsed."""
    result = ok(memtape(*args, "--json"))
    try:
        return json.loads(result.stdout)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"not JSON: {exc}\n{describe(result)}") from exc


@dataclass(frozen=True)
class Site:
    """One row of a ``--json`` site list: its innermost frame, bytes and block count. A
    block with no Python frame (a native allocation by a thread that runs no Python, or
    outside the program's own frames) has an empty filename and line 0."""

    filename: str
    line: int
    function: str
    bytes: int
    count: int

    @classmethod
    def of(cls, row: dict[str, Any]) -> Site:
        frame = row["frames"][0] if row["frames"] else {"filename": "", "line": 0, "function": ""}
        return cls(frame["filename"], frame["line"], frame["function"], row["bytes"], row["count"])

    def at(self, path: str | os.PathLike[str], line: int) -> bool:
        return self.filename == os.fspath(path) and self.line == line


def sites(rows: list[dict[str, Any]]) -> list[Site]:
    return [Site.of(row) for row in rows]


def within(value: float, expected: float, fraction: float = 0.01) -> bool:
    return abs(value - expected) <= fraction * expected


def folded_by_leaf(text: str) -> dict[str, int]:
    """Bytes per innermost frame of ``flamegraph --folded`` output (``a;b;c BYTES``)."""
    totals: dict[str, int] = {}
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        assert stack and count.isdigit(), f"not a folded line: {line!r}"
        leaf = stack.rsplit(";", 1)[-1]
        totals[leaf] = totals.get(leaf, 0) + int(count)
    return totals


def capture_blocks(data: bytes) -> tuple[int, list[tuple[int, int, int]]]:
    """``(header_end, [(offset, kind, length)])``: where the file header ends and each
    complete block (header included) of a capture's bytes."""
    (meta_len,) = struct.unpack_from("<I", data, 12)
    offset = header_end = FILE_HEADER_FIXED + meta_len + 4
    blocks = []
    while offset + BLOCK_HEADER <= len(data):
        assert data[offset : offset + 4] == b"MTBK", f"no block at offset {offset}"
        kind = data[offset + 4]
        (payload,) = struct.unpack_from("<I", data, offset + 8)
        end = offset + BLOCK_HEADER + payload
        if end > len(data):
            break
        blocks.append((offset, kind, end - offset))
        offset = end
    return header_end, blocks


def no_traceback(stderr: str) -> bool:
    return "Traceback (most recent call last)" not in stderr


def memtape_frames(stderr: str) -> list[str]:
    """Lines of a traceback that point into memtape's package or runpy."""
    return [
        line
        for line in stderr.splitlines()
        if line.lstrip().startswith("File ")
        and (str(PACKAGE_DIR) in line or '"<frozen runpy>"' in line)
    ]


def console_script() -> str:
    """The ``memtape`` console script installed beside the test interpreter."""
    path = Path(sys.executable).with_name("memtape")
    assert path.is_file(), f"no memtape console script beside {sys.executable}"
    return str(path)
