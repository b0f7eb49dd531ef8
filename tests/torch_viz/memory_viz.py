"""Check a snapshot pickle with PyTorch's own memory_viz CLI, the way users run it.

``check_snapshot(path)`` runs ``python _memory_viz.py CMD path`` (torch is not needed)
for ``stats``, ``trace``, ``trace_plot`` and ``segment_plot`` in a child of this
interpreter, and raises ``SnapshotCheckError`` if any of them fails. The two HTML pages
must embed the snapshot: their base64 payload must unpickle to the same data as the file.

``load_memory_viz()`` imports the same file as a module, for tests that call its
functions directly (``segsum``, ``trace``, ``segments(d, format_flamegraph=...)``, ...).

Both fetch the file from PyPI the first time (see ``fetch_memory_viz``); if that fails
they raise ``MemoryVizUnavailable``, so the calling test fails with the reason.
"""

from __future__ import annotations

import base64
import functools
import importlib.util
import json
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

from .fetch_memory_viz import MemoryVizUnavailable, fetch_memory_viz

__all__ = [
    "COMMANDS",
    "MemoryVizUnavailable",
    "SnapshotCheckError",
    "check_snapshot",
    "load_memory_viz",
    "memory_viz_path",
]

PLOT_VIEWS = {"trace_plot": "Active Memory Timeline", "segment_plot": "Allocator State History"}
COMMANDS = ("stats", "trace", *PLOT_VIEWS)
TIMEOUT_S = 300
SNAPSHOT_LINE = "const local_files = "


class SnapshotCheckError(AssertionError):
    """PyTorch's memory_viz rejected a snapshot, or its output does not hold the snapshot."""


def memory_viz_path() -> Path:
    """Path of the verified ``_memory_viz.py``, fetched on first use."""
    return fetch_memory_viz()


@functools.cache
def load_memory_viz() -> ModuleType:
    """``torch/cuda/_memory_viz.py`` as a module, loaded from its file (torch is not imported)."""
    path = memory_viz_path()
    spec = importlib.util.spec_from_file_location("torch_cuda_memory_viz", path)
    if spec is None or spec.loader is None:
        raise MemoryVizUnavailable(f"cannot load {path} as a module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_snapshot(path: str | os.PathLike[str], *, timeout_s: float = TIMEOUT_S) -> dict[str, str]:
    """Run every command on ``path``; return ``{command: stdout or HTML}`` or raise."""
    snapshot = Path(path).resolve()
    script = memory_viz_path()
    outputs: dict[str, str] = {}
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="memory_viz-") as scratch:
        for command in COMMANDS:
            try:
                outputs[command] = _run_command(script, command, snapshot, Path(scratch), timeout_s)
            except SnapshotCheckError as exc:
                failures.append(str(exc))
    if not failures:
        expected = read_like_cli(snapshot)
        failures = [_plot_failure(outputs[cmd], cmd, expected) for cmd in PLOT_VIEWS]
        failures = [failure for failure in failures if failure]
    if failures:
        raise SnapshotCheckError(
            f"PyTorch's memory_viz rejects {snapshot}:\n\n" + "\n\n".join(failures)
        )
    return outputs


def _run_command(
    script: Path, command: str, snapshot: Path, scratch: Path, timeout_s: float
) -> str:
    """stdout of ``python _memory_viz.py command snapshot``, or the HTML it writes for plots."""
    argv = [sys.executable, str(script), command, str(snapshot)]
    html = scratch / f"{command}.html"
    if command in PLOT_VIEWS:
        argv += ["-o", str(html)]
    shown = f"`python _memory_viz.py {command} {snapshot.name}`"
    try:
        result = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_s, cwd=scratch, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise SnapshotCheckError(f"{shown} ran longer than {timeout_s} s") from exc
    if result.returncode != 0:
        raise SnapshotCheckError(
            f"{shown} exited with status {result.returncode}:\n{_tail(result.stderr)}"
        )
    if command not in PLOT_VIEWS:
        return result.stdout
    if not html.is_file():
        raise SnapshotCheckError(f"{shown} wrote no {html.name}")
    return html.read_text(encoding="utf-8")


def read_like_cli(path: Path) -> Any:
    """The snapshot as the CLI's ``_read`` sees it (a bare list is a segments-only file)."""
    with path.open("rb") as file:
        data = pickle.load(file)  # our own test output, not untrusted input
    if isinstance(data, list):
        data = {"segments": data, "traces": []}
    return data


def embedded_snapshot(html: str) -> Any:
    """Unpickle the one snapshot a memory_viz HTML page embeds (base64, NUL-padded)."""
    lines = [line for line in html.splitlines() if line.startswith(SNAPSHOT_LINE)]
    if len(lines) != 1:
        raise ValueError(f"expected one `{SNAPSHOT_LINE}[...]` line, found {len(lines)}")
    files = json.loads(lines[0].removeprefix(SNAPSHOT_LINE))
    if [entry.get("name") for entry in files] != ["snapshot.pickle"]:
        raise ValueError(f"expected one embedded snapshot.pickle, found {files!r:.200}")
    padded = base64.b64decode(files[0]["base64"], validate=True)
    payload = padded.rstrip(b"\0")  # a pickle ends with STOP ('.'), never with NUL
    if not 1 <= len(padded) - len(payload) <= 3 or len(padded) % 3:
        raise ValueError("the embedded pickle is not NUL-padded to a multiple of 3 bytes")
    return pickle.loads(payload)


def _plot_failure(html: str, command: str, expected: Any) -> str:
    """Why ``html`` is not a ``command`` page of ``expected`` ('' if it is)."""
    view_call = f"add_local_files(local_files, {PLOT_VIEWS[command]!r})"
    if view_call not in html:
        return f"{command}: the HTML does not call `{view_call}`"
    try:
        embedded = embedded_snapshot(html)
    except (ValueError, pickle.UnpicklingError, EOFError) as exc:
        return f"{command}: cannot read the snapshot embedded in the HTML: {exc}"
    if embedded != expected:
        return f"{command}: the snapshot embedded in the HTML differs from the file"
    return ""


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])
