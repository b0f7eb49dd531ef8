"""benchmarks/results_page.py --quick: one command measures every target and writes the page.

No timing is asserted (``--quick`` numbers mean nothing); the page's structure is: every
target's row with a value and a verdict, the command, the date, the commit, the CPython
version, each round's load average, and ``--write`` replacing only what lies between the
markers.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import memtape._native

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "results_page.py"


def load_page_module() -> Any:
    spec = importlib.util.spec_from_file_location("results_page", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["results_page"] = module
    spec.loader.exec_module(module)
    return module


PAGE: Any = load_page_module()
TARGET_NAMES = [target.name for target in PAGE.TARGETS]


def run_page(*args: str, keep: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Runs results_page.py --quick; moves the raw JSON it leaves in benchmarks/out to
    `keep`, or removes it."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--python", sys.executable, "--quick", *args],
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
        cwd=ROOT,
    )
    for raw in re.findall(r"raw numbers: (\S+results-page-\S+\.json)", proc.stderr):
        assert Path(raw).parent == ROOT / "benchmarks" / "out", raw
        if keep is not None:
            shutil.move(raw, keep)
        Path(raw).unlink(missing_ok=True)
    return proc


def from_json(raw: Path) -> subprocess.CompletedProcess[str]:
    """results_page.py --from-json RAW (the table made again, nothing measured), run in
    RAW's folder."""
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--from-json", str(raw)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=raw.parent,
    )


def table_rows(page: str) -> dict[str, list[str]]:
    """The targets' table: its rows by target name (the first cell)."""
    lines = page.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| target |"))
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("| "):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


def test_quick_write_puts_every_target_between_the_markers(tmp_path: Path) -> None:
    page = tmp_path / "RESULTS.md"
    old = f"# Results\n\n{PAGE.BEGIN}\nan old table\n{PAGE.END}\n\nThe history: HISTORY.md.\n"
    page.write_text(old)

    proc = run_page("--rounds", "1", "--write", "--page", str(page))

    assert proc.returncode == 0, proc.stderr[-6000:]
    text = page.read_text()
    assert text.startswith("# Results\n\n")
    assert "an old table" not in text
    assert text.count(PAGE.BEGIN) == 1 and text.count(PAGE.END) == 1
    assert text.endswith(f"{PAGE.END}\n\nThe history: HISTORY.md.\n")
    assert "QUICK" in text
    assert "Command: `python3 benchmarks/results_page.py " in text
    assert "--quick" in text.split("Command:", 1)[1].splitlines()[0]
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    assert re.search(rf"commit {head}(-dirty)?\n", text), text
    today = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    assert f"date: {today}" in text
    assert f"CPython {platform.python_version()}" in text
    # Which build was measured: the one this interpreter imports.
    assert f"memtape build: {memtape._native.BUILD_KIND}" in text
    assert memtape._native.BUILD_KIND in {"pgo", "plain", "instrumented"}
    assert re.search(r"round 1: started .* load average \(1, 5, 15 min\) [0-9.]+, ", text)

    rows = table_rows(text)
    assert list(rows) == TARGET_NAMES
    for name, cells in rows.items():
        goal, value, median, verdict, _beside = cells
        assert goal, name
        if name.startswith("pandas") and importlib.util.find_spec("pandas") is None:
            assert (value, verdict) == ("n/a", "n/a"), cells
            assert "`pandas` is not installed" in text
            continue
        # Every target available here was measured: a number, and whether it holds.
        assert re.fullmatch(r"[0-9.]+(x| s| MB)", value), (name, cells)
        assert median == value, cells
        assert verdict in ("**yes**", "**NO**"), cells
    assert "FAILED" not in text
    # The hot rows name the floor of exact recording measured in the same round, where
    # hook_floor.py can read the interpreter's frames.
    beside = rows["alloc_heavy, memtape.tracemalloc nframe 25"][4]
    floor = r"; in process: memtape25 [0-9.]+x, the floor \(stack \+ lock\) [0-9.]+x"
    if (3, 11) <= sys.version_info[:2] <= (3, 12):
        assert re.search(floor, beside), beside
    else:
        assert "floor" not in beside, beside
        assert "reads the frames of CPython 3.11 and 3.12 only" in text
    # The peak RSS rows: untraced, memtape run, memtape run -q, memray, per program.
    assert "| program | untraced | `memtape run` | `memtape run -q` | memray |" in text
    for program in ("alloc_heavy", "mypy"):
        rss_cells = r" \| [0-9]+" * 4
        assert re.search(rf"\| {program}{rss_cells} \| [0-9.]+ \| ", text), (program, text)
    assert "mypy peak RSS overhead: `memtape run` / memray" in rows
    # pytest, pytest --memray and pytest --memtape side by side on both suites.
    assert "| suite | `pytest` | `pytest --memray` | `pytest --memtape` |" in text
    for suite in ("more-itertools' suite", "5,000 tiny tests"):
        cells = r" \| [0-9.]+ s \([0-9.]+x\)"
        assert re.search(rf"\| {suite}{cells * 3} \|", text), (suite, text)


def test_rounds_are_columns_and_parts_left_out_say_so(tmp_path: Path) -> None:
    raw = tmp_path / "raw.json"
    proc = run_page("--rounds", "2", "--parts", "hot", keep=raw)

    assert proc.returncode == 0, proc.stderr[-6000:]
    header = next(line for line in proc.stdout.splitlines() if line.startswith("| target"))
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "target",
        "goal",
        "round 1",
        "round 2",
        "median",
        "holds",
        "beside",
    ]
    assert "round 2: started" in proc.stdout
    rows = table_rows(proc.stdout)
    nframe25 = rows["alloc_heavy, memtape.tracemalloc nframe 25"]
    first, second, median = (float(cell.rstrip("x")) for cell in nframe25[1:4])
    assert abs(median - (first + second) / 2) <= 0.011, nframe25
    assert rows["mypy under `memtape run` (wall)"][4:] == ["not measured", ""]
    assert rows["reports on alloc_heavy's capture: peak RSS"][4] == "not measured"
    assert "unsteady" not in proc.stdout  # one run a round: no spread to judge

    # The same rounds, the second made unsteady: its untraced runs spread by 65 %
    # (HISTORY 50's round 3) and the capture in it reads as fast as untraced.
    data = json.loads(raw.read_text())
    second = data["rounds"][1]["run"]["alloc_heavy"]["configs"]
    second["untraced"]["runs"] = [{"seconds": s} for s in (1.25, 2.06, 1.85)]
    second["untraced"]["median_s"] = 1.85
    capture = data["rounds"][0]["run"]["alloc_heavy"]["configs"]["memtape-capture"]
    first = data["rounds"][0]["run"]["alloc_heavy"]["configs"]["untraced"]["median_s"]
    capture["median_s"] = first * 1.5
    second["memtape-capture"]["median_s"] = 1.85
    raw.write_text(json.dumps(data))
    again = from_json(raw)
    assert again.returncode == 0, again.stderr
    assert "**round 1 was unsteady**" not in again.stdout
    assert (
        "- **round 2 was unsteady**: alloc_heavy's untraced runs read 1.25, 2.06, 1.85 s "
        "(65% apart)" in again.stdout
    ), again.stdout
    rows = table_rows(again.stdout)
    capture_row = rows["alloc_heavy, `memtape run` capture (memtape-capture)"]
    assert capture_row[1] == "1.50x" and capture_row[2] == "1.00x unsteady", capture_row
    # The median of 1.50x and 1.00x holds 1.35x; the steady round alone does not.
    assert capture_row[4] == "**yes** (steady rounds only: 1.50x, NO)", capture_row
    for name, cells in rows.items():
        hot = name.startswith("alloc_heavy, ")
        assert cells[2].endswith(" unsteady") == hot, (name, cells)
        assert not cells[1].endswith(" unsteady"), (name, cells)


def test_from_json_makes_the_same_table_again_without_measuring(tmp_path: Path) -> None:
    page = tmp_path / "RESULTS.md"
    raw = tmp_path / "raw.json"
    proc = run_page("--rounds", "1", "--parts", "deep", "--write", "--page", str(page), keep=raw)
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert raw.exists()

    again = from_json(raw)

    assert again.returncode == 0, again.stderr
    assert "$ " not in again.stderr  # no benchmark script ran
    written = page.read_text()
    table = written[written.index(PAGE.BEGIN) : written.index(PAGE.END) + len(PAGE.END)]
    assert again.stdout == table + "\n"
