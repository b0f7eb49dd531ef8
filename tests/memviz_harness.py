"""Runs PyTorch's own memory viewer on a snapshot, headless, through ``../shared/memviz``.

The harness there (``render.mjs``, see its README) loads a snapshot into MemoryViz.js in
headless Chromium, draws each of the four views and makes a user's first interactions
(hovering timeline polygons, selecting events in Allocator State History, hovering the
redrawn segments and blocks). It runs with node and needs ``d3@7`` and
``playwright-core`` from npm: they are installed once into
``${XDG_CACHE_HOME:-~/.cache}/memtape/memviz_npm`` (``MEMTAPE_MEMVIZ_NPM_DIR`` moves it).
Nothing is written into the shared folder. A missing harness, node, npm or Chromium
fails the test that needs it (``scripts/test.sh`` installs node, npm and Chromium).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from torch_viz.fetch_memory_viz import directory_lock

REPO = Path(__file__).resolve().parent.parent
MEMVIZ = REPO.parent / "shared" / "memviz"
VIEWS = (
    "Active Memory Timeline",
    "Active Cached Segment Timeline",
    "Allocator State History",
    "Allocated Memory (incl. Private Pools)",
)
NPM_PACKAGES = ("d3@7", "playwright-core")
NPM_DIR_ENV = "MEMTAPE_MEMVIZ_NPM_DIR"


def render_script() -> Path:
    """``render.mjs`` of the shared harness; fails the test when it is missing."""
    script = MEMVIZ / "render.mjs"
    if not script.is_file():
        pytest.fail(f"the memory viewer harness is missing: expected {script} (../shared/memviz)")
    return script


def npm_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get(NPM_DIR_ENV) or Path(xdg) / "memtape" / "memviz_npm")


def _installed(directory: Path) -> bool:
    modules = directory / "node_modules"
    return (modules / "d3" / "dist" / "d3.min.js").is_file() and (
        modules / "playwright-core" / "package.json"
    ).is_file()


def ensure_npm_packages() -> Path:
    """The folder holding the harness's npm packages, installed on first use."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: install it (apt-get install nodejs npm)")
    directory = npm_dir()
    if _installed(directory):
        return directory
    with directory_lock(directory):
        if not _installed(directory):
            if not (directory / "package.json").is_file():
                (directory / "package.json").write_text(
                    '{"name": "memtape-memviz", "private": true}\n'
                )
            proc = subprocess.run(
                ["npm", "install", "--no-audit", "--no-fund", "--no-save", *NPM_PACKAGES],
                cwd=directory,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            if proc.returncode != 0 or not _installed(directory):
                pytest.fail(
                    f"npm install {' '.join(NPM_PACKAGES)} in {directory} failed:\n"
                    f"{proc.stderr[-3000:]}"
                )
    return directory


def render(snapshot: Path, out: Path, *, probe: int = 300) -> dict[str, str]:
    """Renders ``snapshot`` in every view (one Chromium launch) with ``probe`` interactions
    of each kind and ``--strict`` (NaN or ``undefined`` shown anywhere is an error).
    Returns each view's result line; fails with the harness's report on any error."""
    proc = subprocess.run(
        [
            "node",
            str(render_script()),
            "--npm-dir",
            str(ensure_npm_packages()),
            "--snapshot",
            str(snapshot),
            "--out",
            str(out),
            "--probe",
            str(probe),
            "--strict",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = {}
    for line in proc.stdout.splitlines():
        for view in VIEWS:
            if line.startswith(f"{view}: "):
                lines[view] = line[len(view) + 2 :]
    report = out / "report.json"
    details = report.read_text()[:6000] if report.is_file() else proc.stderr[-3000:]
    if proc.returncode != 0 or set(lines) != set(VIEWS):
        pytest.fail(
            f"the viewer failed on {snapshot.name} (exit {proc.returncode}):\n"
            f"{proc.stdout}\n{details}"
        )
    assert all(result.startswith("ok ") for result in lines.values()), lines
    assert report_problems(out) == [], details
    return lines


def stat(line: str, key: str) -> int:
    """One ``key=N`` number of a view's result line."""
    for word in line.replace("(", " ").replace(")", " ").split():
        if word.startswith(f"{key}="):
            return int(word.split("=", 1)[1])
    raise AssertionError(f"no {key}= in {line!r}")


def one_device(snapshot: dict[str, Any], device: int) -> dict[str, Any]:
    """The snapshot as the viewer shows ``device``: the other devices' traces emptied and
    their segments left out (each view reads only the chosen device's), so that the
    harness, which draws the default device, draws this one."""
    traces = [trace if i == device else [] for i, trace in enumerate(snapshot["device_traces"])]
    segments = [s for s in snapshot["segments"] if s["device"] == device]
    return {**snapshot, "device_traces": traces, "segments": segments}


def write_pickle(snapshot: dict[str, Any], path: Path) -> Path:
    path.write_bytes(pickle.dumps(snapshot, protocol=4))
    return path


def report_problems(out: Path) -> list[Any]:
    """Errors and warnings ``report.json`` records for any view (none when all passed)."""
    report = json.loads((out / "report.json").read_text())
    return [
        (result["view"], kind, item)
        for result in report["results"]
        for kind in ("errors", "warnings")
        for item in result.get(kind, [])
    ]
