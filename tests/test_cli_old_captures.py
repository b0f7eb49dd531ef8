"""Today's ``memtape stats`` and ``memtape top`` on captures that old versions wrote.

``crates/memtape-core/tests/fixtures/old_captures`` holds captures in format versions 1
to 3, each with what its version's own commands printed about it (``NAME.old-reports.txt``,
its README.md says how). Today's commands must print the same numbers and sites.
Native frames are named from the module files on the machine that reads a capture (C
sources where they are the same builds as on the machine that recorded, else
``module+offset``), so they are compared as native frames only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from memtape_cli import read_json

OLD_CAPTURES = (
    Path(__file__).resolve().parent.parent / "crates/memtape-core/tests/fixtures/old_captures"
)
NAMES = ["v1", "v2", "v2-native", "v3", "v3-native"]


def old_json(name: str, command: str) -> Any:
    """What the old version printed for ``memtape COMMAND NAME.mtape``."""
    text = (OLD_CAPTURES / f"{name}.old-reports.txt").read_text()
    prompt = f"$ memtape {command} {name}.mtape\n"
    assert prompt in text, f"{name}.old-reports.txt has no {prompt!r}"
    return json.loads(text.split(prompt, 1)[1].split("\n", 1)[0])


def is_native(frame: dict[str, Any]) -> bool:
    """Whether a frame is native: named from C sources, or a module's file."""
    filename: str = frame["filename"]
    return filename.endswith(".c") or ".so" in filename


def comparable(sites: list[dict[str, Any]]) -> list[tuple[int, int, list[Any]]]:
    """Each site's bytes, count and frames; a native frame as ``native``."""

    def frame(f: dict[str, Any]) -> Any:
        return "native" if is_native(f) else (f["filename"], f["line"], f["function"])

    return [(site["bytes"], site["count"], [frame(f) for f in site["frames"]]) for site in sites]


@pytest.mark.parametrize("name", NAMES)
def test_stats_says_what_the_old_version_said(name: str) -> None:
    old = old_json(name, "stats --json")
    # The old versions showed import machinery; today's reports hide it unless asked.
    new = read_json("stats", "--imports", "show", OLD_CAPTURES / f"{name}.mtape")
    for key in ("events", "duration_ns", "dropped", "markers"):
        assert new[key] == old[key], key
    assert {k: new["totals"][k] for k in old["totals"]} == old["totals"]
    for moment in ("peak", "end"):
        assert {k: new[moment][k] for k in old[moment] if k != "by_source"} == {
            k: v for k, v in old[moment].items() if k != "by_source"
        }
        by_source = old[moment]["by_source"]
        assert {k: new[moment]["by_source"][k] for k in by_source} == by_source
    for key in ("top", "leaks"):
        assert comparable(new[key]) == comparable(old[key]), key


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("at", ["", "--at end "])
def test_top_by_traceback_says_what_the_old_version_said(name: str, at: str) -> None:
    old = old_json(name, f"top --by traceback --limit 4 {at}--json")
    args = ["top", "--by", "traceback", "--limit", "4", "--imports", "show", *at.split()]
    new = read_json(*args, OLD_CAPTURES / f"{name}.mtape")
    assert new["total_bytes"] == old["total_bytes"]
    assert comparable(new["sites"]) == comparable(old["sites"])
