"""The reading commands: ``stats``, ``top``, ``diff`` and ``export``, text and JSON.

Captures are recorded once per module from small programs whose interesting lines are
marked ``# @tm:<tag>``; every check reads them back through the real command.
"""

from __future__ import annotations

import importlib.metadata
import json
import pickle
import re
from pathlib import Path
from typing import Any

import pytest
from child_python import describe
from memtape_cli import Site, memtape, ok, python, read_json, record, sites, within, write_program
from source_lines import line_of
from torch_viz.memory_viz import check_snapshot

GROWTH = """
import sys

keep = [bytearray(1_000_000)]  # @tm:base


def grow():
    keep.append(bytearray(8_000_000))  # @tm:more


def churn():
    for _ in range(50):
        tmp = bytearray(100_000)  # @tm:churn
        del tmp


churn()
if "more" in sys.argv:
    grow()
"""

MARKERS = """
import memtape._native as native

keep = [bytearray(2_000_000)]  # @tm:early
print(native.mark("before"))
keep.append(bytearray(5_000_000))  # @tm:between
native.mark("after")
keep.append(bytearray(3_000_000))  # @tm:late
"""

STATS_KEYS = {"run", "duration_ns", "events", "totals", "peak", "end", "dropped", "markers"}
TOTALS_KEYS = {"allocs", "frees", "bytes_allocated", "bytes_freed", "unknown_frees"}
ROW_KEYS = {"bytes", "count", "frames"}
FRAME_KEYS = {"filename", "function", "line"}
DIFF_KEYS = {"bytes", "bytes_diff", "count", "count_diff", "frames"}


class Recorded:
    """The module's captures: the growth program run without and with "more", and the
    marker program."""

    def __init__(self, root: Path) -> None:
        self.growth = write_program(root / "growth.py", GROWTH)
        self.old = root / "old.mtape"
        self.new = root / "new.mtape"
        record(self.growth, self.old)
        record(self.growth, self.new, "more")
        self.markers = write_program(root / "markers.py", MARKERS)
        self.marked = root / "marked.mtape"
        result = record(self.markers, self.marked)
        assert result.stdout == "True\n", describe(result)


@pytest.fixture(scope="module")
def rec(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    return Recorded(tmp_path_factory.mktemp("reports"))


def check_row(row: dict[str, Any], keys: set[str] = ROW_KEYS) -> None:
    assert set(row) == keys, row
    assert row["frames"], row
    for frame in row["frames"]:
        assert set(frame) == FRAME_KEYS, frame
        assert isinstance(frame["line"], int) and isinstance(frame["filename"], str)


# --- stats --------------------------------------------------------------------------


def test_stats_json_shape_and_totals(rec: Recorded) -> None:
    stats = read_json("stats", rec.new, "--limit", "3")
    assert STATS_KEYS <= set(stats), sorted(stats)
    assert TOTALS_KEYS <= set(stats["totals"])
    assert stats["run"]["argv"] == [str(rec.growth), "more"]
    assert stats["run"]["command"] == "script"
    assert stats["run"]["exit"] == "normal" and stats["run"]["cut_short"] is False
    assert len(stats["top"]) == 3
    for row in stats["top"] + stats["leaks"]:
        check_row(row)
    totals, peak, end = stats["totals"], stats["peak"], stats["end"]
    # Frees of blocks allocated before the program began (the interpreter's, and runpy's
    # loading of the script, which is not the program's) are counted apart and change no
    # totals (tests/test_capture_frees.py).
    known_frees = totals["frees"] - totals["unknown_frees"]
    assert totals["allocs"] >= known_frees > 0
    assert totals["unknown_frees"] >= 0, totals
    assert stats["events"] >= totals["allocs"] + totals["frees"]
    assert end["bytes"] == totals["bytes_allocated"] - totals["bytes_freed"]
    assert peak["bytes"] >= end["bytes"] >= 9_000_000
    assert peak["bytes"] >= sum(row["bytes"] for row in stats["top"])
    assert 0 <= peak["time_ns"] <= stats["duration_ns"]
    assert [r["bytes"] for r in stats["top"]] == sorted(
        (r["bytes"] for r in stats["top"]), reverse=True
    )
    first = Site.of(stats["top"][0])
    assert first.at(rec.growth, line_of(rec.growth, "more")) and first.function == "grow"
    leak = Site.of(stats["leaks"][0])
    assert leak.at(rec.growth, line_of(rec.growth, "more"))


def test_stats_text(rec: Recorded) -> None:
    out = ok(memtape("stats", rec.new, "--limit", "2")).stdout
    for label in ("Capture:", "Python:", "Duration:", "Allocations:", "Frees:", "Peak memory:"):
        assert re.search(rf"^{label}\s+\S", out, re.M), (label, out)
    assert "Live at end:" in out
    assert "Top allocation sites at the peak:" in out
    rows = _table_rows(out.split("Top allocation sites at the peak:")[1])
    assert len(rows) == 2, out
    assert f"{rec.growth}:{line_of(rec.growth, 'more')} in grow" in rows[0]
    assert re.search(r"\.\.\. and \d+ more sites", out), out


def _table_rows(text: str) -> list[str]:
    """Rows of a numbered site table (``1  7.6 MiB ...``)."""
    return [line for line in text.splitlines() if re.match(r"^\s*\d+\s+\d", line)]


# --- top ----------------------------------------------------------------------------


def test_top_json_totals_agree_with_stats(rec: Recorded) -> None:
    stats = read_json("stats", rec.new)
    for at, moment in (("peak", "peak"), ("end", "end")):
        top = read_json("top", rec.new, "--at", at, "--limit", "100000")
        assert set(top) == {"total_bytes", "sites", "by_source"}
        assert top["total_bytes"] == stats[moment]["bytes"], at
        assert sum(top["by_source"].values()) == top["total_bytes"], at
        assert sum(row["bytes"] for row in top["sites"]) == top["total_bytes"], at
        for row in top["sites"]:
            check_row(row)


def test_top_by_lineno_filename_and_traceback(rec: Recorded) -> None:
    more = line_of(rec.growth, "more")
    by_line = read_json("top", rec.new, "--by", "lineno", "--limit", "3")
    assert Site.of(by_line["sites"][0]).at(rec.growth, more)
    assert len(by_line["sites"]) == 3  # of the script's 4 (its lines only)

    by_file = read_json("top", rec.new, "--by", "filename", "--limit", "100000")
    script_rows = [s for s in sites(by_file["sites"]) if s.filename == str(rec.growth)]
    assert len(script_rows) == 1, script_rows
    lines_of_script = [
        s for s in sites(read_json("top", rec.new, "--limit", "100000")["sites"])
        if s.filename == str(rec.growth)
    ]  # fmt: skip
    assert script_rows[0].bytes == sum(s.bytes for s in lines_of_script)

    by_tb = read_json("top", rec.new, "--by", "traceback", "--limit", "1")
    frames = by_tb["sites"][0]["frames"]
    assert (frames[0]["filename"], frames[0]["line"]) == (str(rec.growth), more)
    # Innermost first: grow() was called from the module's last line.
    assert frames[1]["filename"] == str(rec.growth) and frames[1]["function"] == "<module>"


def test_top_text(rec: Recorded) -> None:
    out = ok(memtape("top", rec.new, "--limit", "2")).stdout
    header = out.splitlines()[0].split()
    assert header == ["#", "Size", "Share", "Count", "Location"], out
    rows = _table_rows(out)
    assert len(rows) == 2
    assert f"{rec.growth}:{line_of(rec.growth, 'more')} in grow" in rows[0]
    assert "%" in rows[0] and "MiB" in rows[0]
    tb = ok(memtape("top", rec.new, "--by", "traceback", "--limit", "1")).stdout
    assert f"called from {rec.growth}:" in tb, tb


def test_top_at_end_leaves_out_freed_memory(rec: Recorded) -> None:
    churn = line_of(rec.growth, "churn")
    at_end = sites(read_json("top", rec.new, "--at", "end", "--limit", "100000")["sites"])
    assert not [s for s in at_end if s.at(rec.growth, churn) and s.bytes >= 100_000]


# --- diff ---------------------------------------------------------------------------


def test_diff_between_two_files(rec: Recorded) -> None:
    diff = read_json("diff", rec.old, rec.new, "--limit", "5")
    assert set(diff) == {"diffs"}
    for row in diff["diffs"]:
        check_row(row, DIFF_KEYS)
    first = diff["diffs"][0]
    site = Site.of(first)
    assert site.at(rec.growth, line_of(rec.growth, "more")), site
    assert within(first["bytes_diff"], 8_000_000) and first["bytes_diff"] > 0
    assert first["count_diff"] > 0
    base = [r for r in diff["diffs"] if Site.of(r).at(rec.growth, line_of(rec.growth, "base"))]
    assert all(abs(r["bytes_diff"]) < 1000 for r in base), base


def test_diff_reversed_shrinks(rec: Recorded) -> None:
    first = read_json("diff", rec.new, rec.old, "--limit", "1")["diffs"][0]
    assert Site.of(first).at(rec.growth, line_of(rec.growth, "more"))
    assert first["bytes"] == 0 and within(-first["bytes_diff"], 8_000_000)


def test_diff_text(rec: Recorded) -> None:
    out = ok(memtape("diff", rec.old, rec.new, "--limit", "3")).stdout
    lines = out.strip().splitlines()
    assert lines[0].split() == ["Size", "Diff", "Count", "Diff", "Location"], out
    assert f"{rec.growth}:{line_of(rec.growth, 'more')} in grow" in lines[1], out
    assert "+7.6 MiB" in lines[1], out
    assert lines[-1].startswith("Total:"), out


def test_diff_between_markers(rec: Recorded) -> None:
    stats = read_json("stats", rec.marked)
    labels = [m["label"] for m in stats["markers"]]
    assert labels == ["before", "after"], stats["markers"]
    assert stats["markers"][0]["event_index"] < stats["markers"][1]["event_index"]

    between = read_json("diff", rec.marked, "--from", "marker:before", "--to", "marker:after")
    first = between["diffs"][0]
    assert Site.of(first).at(rec.markers, line_of(rec.markers, "between")), first
    assert within(first["bytes_diff"], 5_000_000)
    for tag in ("early", "late"):
        line = line_of(rec.markers, tag)
        rows = [r for r in between["diffs"] if Site.of(r).at(rec.markers, line)]
        assert all(abs(r["bytes_diff"]) < 1000 for r in rows), (tag, rows)

    after = read_json("diff", rec.marked, "--from", "marker:after", "--to", "end")
    first = after["diffs"][0]
    assert Site.of(first).at(rec.markers, line_of(rec.markers, "late")), first
    assert within(first["bytes_diff"], 3_000_000)

    whole = read_json("diff", rec.marked, "--from", "start", "--to", "end")
    grown = {Site.of(r).line: r["bytes_diff"] for r in whole["diffs"] if r["bytes_diff"] > 0}
    for tag, size in (("early", 2_000_000), ("between", 5_000_000), ("late", 3_000_000)):
        assert within(grown.get(line_of(rec.markers, tag), 0), size), (tag, grown)


@pytest.mark.parametrize(
    "moments",
    [("marker:never", "end"), ("10 hours", "end"), ("start", "marker:")],
    ids=["unknown-marker", "bad-time", "empty-label"],
)
def test_diff_bad_moment_exits_2(rec: Recorded, moments: tuple[str, str]) -> None:
    result = memtape("diff", rec.marked, "--from", moments[0], "--to", moments[1])
    assert result.returncode == 2, describe(result)
    # One line saying what is wrong (after the usage, for a moment that is no moment).
    assert result.stderr.splitlines()[-1].startswith("memtape diff: "), describe(result)
    assert "Traceback" not in result.stderr


def test_diff_needs_two_files_or_moments(rec: Recorded) -> None:
    result = memtape("diff", rec.old)
    assert result.returncode == 2 and "Traceback" not in result.stderr, describe(result)


# --- export -------------------------------------------------------------------------


def test_export_torch_opens_in_pytorch_memory_viz(rec: Recorded, tmp_path: Path) -> None:
    out = tmp_path / "snapshot.pickle"
    result = ok(memtape("export", rec.new, "--format", "torch", "-o", out))
    assert f"wrote {out}" in result.stdout
    check_snapshot(out)
    with out.open("rb") as f:
        snapshot = pickle.load(f)  # our own output
    trace = snapshot["device_traces"][0]
    stats = read_json("stats", rec.new)
    actions = [entry["action"] for entry in trace]
    assert actions.count("alloc") == stats["totals"]["allocs"]
    # A free of a block from before the capture has no alloc to pair with: not exported.
    totals = stats["totals"]
    assert actions.count("free_completed") == totals["frees"] - totals["unknown_frees"]
    more = line_of(rec.growth, "more")
    big = [e for e in trace if e["action"] == "alloc" and e["size"] >= 8_000_000]
    assert big and (big[0]["frames"][0]["filename"], big[0]["frames"][0]["line"]) == (
        str(rec.growth),
        more,
    )


def test_export_torch_max_entries_and_json_form(rec: Recorded, tmp_path: Path) -> None:
    out = tmp_path / "small.pickle"
    ok(memtape("export", rec.new, "--format", "torch", "--max-entries", "100", "-o", out))
    check_snapshot(out)
    with out.open("rb") as f:
        actions = [entry["action"] for entry in pickle.load(f)["device_traces"][0]]
    # The last 100 events: an allocation is one entry, a free two (requested, completed).
    assert actions.count("alloc") + actions.count("free_completed") == 100
    assert actions.count("free_requested") == actions.count("free_completed")
    as_json = tmp_path / "snapshot.json"
    ok(memtape("export", rec.new, "--format", "torch", "-o", as_json))
    data = json.loads(as_json.read_text(encoding="utf-8"))
    assert {"segments", "device_traces"} <= set(data)


LOAD_TRACEMALLOC = """
import json, sys, tracemalloc
snapshot = tracemalloc.Snapshot.load(sys.argv[1])
stats = snapshot.statistics("lineno")
print(json.dumps({
    "limit": snapshot.traceback_limit,
    "top": [[s.traceback[0].filename, s.traceback[0].lineno, s.size, s.count] for s in stats[:3]],
    "total": sum(s.size for s in stats),
}))
"""


def test_export_tracemalloc_loads_in_the_stdlib(rec: Recorded, tmp_path: Path) -> None:
    out = tmp_path / "snapshot.tracemalloc"
    ok(memtape("export", rec.new, "--format", "tracemalloc", "-o", out))
    # A fresh, isolated interpreter: only the standard library reads the file.
    loaded = python("-I", "-c", LOAD_TRACEMALLOC, out)
    assert loaded.returncode == 0, describe(loaded)
    data = json.loads(loaded.stdout)
    at_end = read_json("top", rec.new, "--at", "end")
    expected = Site.of(at_end["sites"][0])
    filename, lineno, size, count = data["top"][0]
    assert (filename, lineno) == (str(rec.growth), line_of(rec.growth, "more"))
    assert (size, count) == (expected.bytes, expected.count)
    assert data["total"] == at_end["total_bytes"]
    assert data["limit"] == 64  # memtape run's default --nframe


def test_export_json_is_the_stats_summary(rec: Recorded, tmp_path: Path) -> None:
    out = tmp_path / "summary.json"
    ok(memtape("export", rec.new, "--format", "json", "-o", out))
    exported = json.loads(out.read_text(encoding="utf-8"))
    assert exported == read_json("stats", rec.new, "--limit", "50")


@pytest.mark.parametrize(
    "argv",
    [
        ["export", "{cap}", "--format", "json", "-o", "{out}"],
        ["report", "{cap}", "-o", "{out}"],
        ["flamegraph", "{cap}", "-o", "{out}"],
    ],
    ids=["export", "report", "flamegraph"],
)
def test_outputs_are_not_overwritten_without_force(
    rec: Recorded, tmp_path: Path, argv: list[str]
) -> None:
    out = tmp_path / "existing.out"
    out.write_text("keep me", encoding="utf-8")
    args = [a.format(cap=rec.old, out=out) for a in argv]
    refused = memtape(*args)
    assert refused.returncode == 2 and "--force" in refused.stderr, describe(refused)
    assert out.read_text(encoding="utf-8") == "keep me"
    ok(memtape(*args, "--force"))
    assert out.read_text(encoding="utf-8") != "keep me"


def test_help_and_unknown_command() -> None:
    assert ok(memtape("--help")).stdout.startswith("usage: memtape")
    for command in ("stats", "top", "diff", "flamegraph", "report", "export", "run"):
        assert ok(memtape(command, "--help")).stdout.startswith("usage"), command
    unknown = memtape("frobnicate")
    assert unknown.returncode == 2 and "unknown command" in unknown.stderr
    version = ok(memtape("--version")).stdout
    assert version == f"memtape {importlib.metadata.version('memtape')}\n"
