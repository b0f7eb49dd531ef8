"""The live view (``memtape live FILE``, ``memtape run --live``) driven as a user would,
in a detached tmux session: ``send-keys`` presses the keys, ``capture-pane`` reads the
screen. The program allocates on known lines for up to a minute: a big live line, rows
of smaller live lines (to scroll), a line in a second file (for the view by file) and a
big block freed at once (allocated since the start, never live for long)."""

from __future__ import annotations

import curses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from memtape import _native
from memtape.live_view.process_state import process_running
from memtape.live_view.screen_lines import site_label
from memtape.live_view.sparkline import ASCII_STEPS, sparkline, time_columns
from memtape.live_view.view_state import KeyAction, SiteView, ViewState
from memtape_cli import PACKAGE_DIR, memtape, python
from tmux_pane import SHOW_S, Pane

#: Sizes of the rows of live lines, biggest first (all below the big line's and the
#: second file's), so that the view's order is known.
ROW_SIZES = [20_000 - 1_000 * i for i in range(12)]


def write_program(directory: Path) -> dict[str, int]:
    """Writes prog.py (and helper_mod.py); returns the line number of each tag."""
    rows = [
        f"    kept.append(bytearray({size}))  # @live:row{i}" for i, size in enumerate(ROW_SIZES)
    ]
    program = [
        "import sys",
        "import time",
        "",
        "import helper_mod",
        "",
        "kept = []",
        "for step in range(int(sys.argv[1])):",
        "    kept.append(bytearray(200_000))  # @live:big",
        *rows,
        "    helper_mod.grow(kept)",
        "    scratch = bytearray(3_000_000)  # @live:churn",
        "    del scratch",
        '    print(f"step {step}", flush=True)',
        "    time.sleep(0.1)",
    ]
    (directory / "prog.py").write_text("\n".join(program) + "\n")
    (directory / "helper_mod.py").write_text(
        "def grow(kept):\n    kept.append(bytearray(50_000))\n"
    )
    return {
        line.rsplit("# @live:", 1)[1]: number
        for number, line in enumerate((directory / "prog.py").read_text().splitlines(), 1)
        if "# @live:" in line
    }


@pytest.fixture
def panes() -> Iterator[Callable[..., Pane]]:
    if shutil.which("tmux") is None:
        pytest.fail(
            "tmux is missing: install it (apt-get install tmux; scripts/test.sh does); for "
            "CPython 3.14/3.15, scripts/sid_root.sh's package list needs it"
        )
    opened: list[Pane] = []

    def open_pane(directory: Path, args: list[str], *, width: int = 110, height: int = 30) -> Pane:
        pane = Pane(directory, args, width=width, height=height)
        opened.append(pane)
        return pane

    yield open_pane
    for pane in opened:
        pane.close()


def site_rows(text: str) -> list[str]:
    """The site labels on the screen, top first."""
    lines = [line.rstrip() for line in text.splitlines()]
    start = next(i for i, line in enumerate(lines) if "blocks" in line and "sites," in line)
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("↑↓") or not line.strip():
            break
        # "  26.7 MiB       280  prog.py:8 in <module>": a size, its unit, blocks, the site.
        rows.append(line.split(None, 3)[3])
    return rows


def line_site(line: int) -> str:
    return f"prog.py:{line} in <module>"


def top_is(site: str) -> Callable[[str], bool]:
    def ready(text: str) -> bool:
        try:
            rows = site_rows(text)
        except StopIteration:
            return False
        return bool(rows) and rows[0] == site

    return ready


def exit_status(pane: Pane) -> int:
    text = pane.wait_for(lambda t: "EXIT=" in t, "exit status")
    return int(text.split("EXIT=", 1)[1].split()[0])


def test_run_live_shows_the_sites_switches_views_scrolls_and_q_stops_the_program(
    tmp_path: Path, panes: Callable[..., Pane]
) -> None:
    lines = write_program(tmp_path)
    # 20 lines: 12 sites a page, fewer than the program's.
    pane = panes(tmp_path, ["run", "--live", "-o", "cap.mtape", "prog.py", "600"], height=20)
    # The top line of the program heads the sites live now within a few seconds.
    text = pane.wait_for(top_is(line_site(lines["big"])), "big line on top")
    assert "[l] live now *" in text
    assert "the program's output goes to cap.mtape.out" in text
    # Memory over time rises to its top (the highest column full).
    memory = next(line for line in text.splitlines() if line.startswith("memory "))
    assert "█" in memory and ", top " in memory
    # The program's prints go to the file, not onto the view.
    assert "step " not in text
    assert "step 0" in (tmp_path / "cap.mtape.out").read_text()
    # Live now, by line: the big line, the second file's line, then the rows by size.
    rows = site_rows(text)
    big = line_site(lines["big"])
    # The freed 3 MB blocks are not live: their line is not among the biggest.
    assert rows == [
        big,
        "helper_mod.py:2 in grow",
        *(line_site(lines[f"row{i}"]) for i in range(10)),
    ]

    # j scrolls one site down, k back up.
    pane.keys("j")
    pane.wait_for(top_is("helper_mod.py:2 in grow"), "scroll by one")
    pane.keys("j", "j")
    pane.wait_for(top_is(line_site(lines["row1"])), "scroll by three")
    pane.keys("k")
    pane.wait_for(top_is(line_site(lines["row0"])), "scroll back by one")

    # a: allocated since the start, the freed 3 MB block first; the view starts at the top.
    pane.keys("a")
    text = pane.wait_for(top_is(line_site(lines["churn"])), "churn line on top")
    assert "[a] allocated since start *" in text
    assert site_rows(text)[1] == line_site(lines["big"])

    # f: live now by file: files, not lines.
    pane.keys("f")
    text = pane.wait_for(top_is("prog.py"), "prog.py on top")
    assert "[f] live now, by file *" in text
    assert site_rows(text)[1] == "helper_mod.py"

    # q stops the program as Ctrl-C would; the capture ends complete.
    pane.keys("q")
    assert exit_status(pane) == 130
    text = pane.text()
    assert "stopping the program (SIGINT)" in text
    assert "the program exited with status 130; its output is in cap.mtape.out" in text
    capture = _native.analyze_capture(str(tmp_path / "cap.mtape"))
    assert capture.complete
    output = (tmp_path / "cap.mtape.out").read_text()
    assert "KeyboardInterrupt" in output and "step 599" not in output


def test_run_live_of_a_program_that_ends_shows_the_end_until_q(
    tmp_path: Path, panes: Callable[..., Pane]
) -> None:
    lines = write_program(tmp_path)
    pane = panes(tmp_path, ["run", "--live", "-o", "cap.mtape", "prog.py", "10"])
    # The trailer is written before the program's interpreter finishes exiting, so a
    # frame may show the ended recording while the process still runs: wait for both.
    text = pane.wait_for(
        lambda t: "recording ended (complete)" in t and " exited · " in t.partition("\n")[0],
        "end of the recording and of the program",
    )
    assert site_rows(text)[0] == line_site(lines["big"])
    assert "EXIT=" not in text  # the view stays until q
    pane.keys("q")
    assert exit_status(pane) == 0
    assert "stopping the program" not in pane.text()
    assert "step 9" in (tmp_path / "cap.mtape.out").read_text()


def test_run_live_stops_the_program_when_its_terminal_closes(
    tmp_path: Path, panes: Callable[..., Pane]
) -> None:
    lines = write_program(tmp_path)
    pane = panes(tmp_path, ["run", "--live", "-o", "cap.mtape", "prog.py", "600"])
    pane.wait_for(top_is(line_site(lines["big"])), "big line on top")
    program = json.loads(_native.capture_metadata(str(tmp_path / "cap.mtape")))["pid"]
    pane.close()  # the terminal goes away: a hang-up
    deadline = time.monotonic() + 3 * SHOW_S
    try:
        while process_running(program):
            assert time.monotonic() < deadline, "the program still runs"
            time.sleep(0.1)
    finally:
        if process_running(program):
            os.kill(program, signal.SIGKILL)
    assert _native.analyze_capture(str(tmp_path / "cap.mtape")).complete
    assert "step 599" not in (tmp_path / "cap.mtape.out").read_text()


def test_live_follows_another_process_capture_and_q_leaves_it_recording(
    tmp_path: Path, panes: Callable[..., Pane]
) -> None:
    lines = write_program(tmp_path)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(PACKAGE_DIR.parent)
    with open(tmp_path / "out.txt", "wb") as out:
        recorder = subprocess.Popen(
            [sys.executable, "-m", "memtape", "run", "-q", "-o", "cap.mtape", "prog.py", "600"],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + SHOW_S
        while not (tmp_path / "cap.mtape").exists():
            assert time.monotonic() < deadline and recorder.poll() is None
            time.sleep(0.05)
        pane = panes(tmp_path, ["live", "cap.mtape"])
        text = pane.wait_for(top_is(line_site(lines["big"])), "big line on top")
        assert f"pid {recorder.pid} running" in text
        assert "q quit (the recording goes on)" in text
        pane.keys("q")
        assert exit_status(pane) == 0
        # The recording goes on: the program runs and its capture grows.
        size = (tmp_path / "cap.mtape").stat().st_size
        time.sleep(1.5)
        assert recorder.poll() is None
        assert (tmp_path / "cap.mtape").stat().st_size > size
    finally:
        os.killpg(recorder.pid, signal.SIGTERM)
        recorder.wait(60)


def test_live_of_a_recording_killed_shows_it_cut_short(
    tmp_path: Path, panes: Callable[..., Pane]
) -> None:
    lines = write_program(tmp_path)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(PACKAGE_DIR.parent)
    recorder = subprocess.Popen(
        [sys.executable, "-m", "memtape", "run", "-q", "-o", "cap.mtape", "prog.py", "600"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + SHOW_S
        while not (tmp_path / "cap.mtape").exists():
            assert time.monotonic() < deadline and recorder.poll() is None
            time.sleep(0.05)
        pane = panes(tmp_path, ["live", "cap.mtape"])
        pane.wait_for(top_is(line_site(lines["big"])), "big line on top")
    finally:
        recorder.kill()  # as the OOM killer would: no trailer
        recorder.wait(60)
    text = pane.wait_for(lambda t: "recording ended (cut short)" in t, "cut short")
    assert f"pid {recorder.pid} exited" in text
    assert site_rows(text)[0] == line_site(lines["big"])


@pytest.fixture
def finished_capture(tmp_path: Path) -> Path:
    (tmp_path / "small.py").write_text("data = bytearray(1000)\n")
    done = memtape("run", "-q", "-o", "small.mtape", "small.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return tmp_path / "small.mtape"


def test_not_a_terminal_gets_one_line_and_status_2(tmp_path: Path, finished_capture: Path) -> None:
    done = memtape("live", finished_capture)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "memtape live: the live view needs a terminal: standard input and output are not both one"
    ]
    (tmp_path / "marks.py").write_text("open('ran', 'w').close()\n")
    done = memtape("run", "--live", "-o", "marks.mtape", "marks.py", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "memtape run: the live view needs a terminal: standard input and output are not both one"
    ]
    # Nothing ran and nothing was written.
    assert not (tmp_path / "ran").exists() and not (tmp_path / "marks.mtape").exists()


def test_a_terminal_too_small_gets_one_line_and_status_2(
    tmp_path: Path, finished_capture: Path, panes: Callable[..., Pane]
) -> None:
    pane = panes(tmp_path, ["live", finished_capture.name], width=50, height=10)
    assert exit_status(pane) == 2
    message = (
        "memtape live: the terminal is 50x10; the live view needs at least 60x12 (columns x lines)"
    )
    assert message in pane.text()
    (tmp_path / "marks.py").write_text("open('ran', 'w').close()\n")
    pane = panes(tmp_path, ["run", "--live", "-o", "m.mtape", "marks.py"], width=80, height=8)
    assert exit_status(pane) == 2
    assert "memtape run: the terminal is 80x8; the live view needs at least 60x12" in pane.text()
    assert not (tmp_path / "ran").exists() and not (tmp_path / "m.mtape").exists()


def test_live_refuses_a_file_that_is_not_a_capture(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a capture at all, but long enough to tell\n")
    done = memtape("live", tmp_path / "notes.txt")
    assert done.returncode == 2
    assert done.stderr.startswith("memtape live: ")
    assert "not a memtape capture" in done.stderr


def test_sparkline_scales_to_the_highest_sample_shown() -> None:
    assert sparkline([0, 1, 4, 8], 6) == "  " + " ▁▄█"
    # Only the last `width` samples count: the old highest one no longer scales them.
    assert sparkline([100, 2, 4], 2) == "▄█"
    assert sparkline([0, 0], 3, steps=ASCII_STEPS) == "   "
    assert sparkline([5, 10], 2, steps=ASCII_STEPS) == "=@"


def test_time_columns_keep_each_stretch_highest_and_carry_it_over_gaps() -> None:
    # 10 s in 5 columns of 2 s: the highest point of each; none in 4-6 s: as before.
    points = [(0.5, 10), (1.0, 30), (2.5, 20), (7.0, 5), (9.9, 8)]
    assert time_columns(points, 5, 10.0) == [30, 20, 20, 5, 8]
    # Before the first point: nothing yet.
    assert time_columns([(6.0, 4)], 5, 10.0) == [0, 0, 0, 4, 4]
    assert time_columns([], 3, 0.0) == [0, 0, 0]


def test_a_site_whose_traceback_is_not_written_yet_says_so_while_recording() -> None:
    unresolved = (("<unresolved>", "<unresolved>", 0),)
    assert site_label(unresolved, "lineno", 60, recording=True) == "[traceback not written yet]"
    assert site_label(unresolved, "lineno", 60) == "<unresolved>:0 in <unresolved>"
    # A long path is cut at its start: the line and the function stay.
    frames = (("/very/long/path/to/some/package/module.py", "load", 12),)
    assert site_label(frames, "lineno", 30) == "…/package/module.py:12 in load"
    assert site_label(frames, "filename", 20) == "…e/package/module.py"


def test_a_python_without_curses_gets_one_line_and_status_2(
    tmp_path: Path, finished_capture: Path
) -> None:
    # As a Python built without ncurses: importing curses fails.
    no_curses = "import sys; sys.modules['_curses'] = None; from memtape.cli import main; main()"
    for args in (["live", str(finished_capture)], ["run", "--live", "small.py"]):
        done = python("-c", no_curses, *args, cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        [line] = done.stderr.splitlines()
        command = args[0]
        assert line.startswith(
            f"memtape {command}: the live view needs Python's curses module, which this "
            "Python lacks (import of _curses halted; None in sys.modules)"
        ), line


def test_live_capture_of_a_finished_file_gives_the_figures_of_the_reports(
    tmp_path: Path,
) -> None:
    lines = write_program(tmp_path)
    done = memtape("run", "-q", "-o", "cap.mtape", "prog.py", "5", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    path = str(tmp_path / "cap.mtape")
    live = _native.LiveCapture(path)
    assert live.wait(60)
    report = _native.analyze_capture(path)
    snapshot = live.snapshot(limit=1000)
    assert snapshot["ended"] == "complete"
    assert (snapshot["current"], snapshot["peak"]) == (report.end_bytes, report.peak[0])
    assert snapshot["sites"] == report.sites(by="lineno", at="end", limit=1000)
    assert snapshot["sites_total"] == report.end_bytes
    by_file = live.snapshot(by="filename", limit=1000)["sites"]
    assert by_file == report.sites(by="filename", at="end", limit=1000)
    # Since the start: each line at least what is live of it; the freed line 5 blocks of
    # 3,000,000 bytes at least, none of them live.
    allocated = {
        frames[0][2]: (size, count)
        for frames, size, count in live.snapshot(table="allocated", limit=1000)["sites"]
        if frames and frames[0][0].endswith("prog.py")
    }
    live_now = {
        frames[0][2]: (size, count)
        for frames, size, count in snapshot["sites"]
        if frames and frames[0][0].endswith("prog.py")
    }
    # (A kept line also grows the list it appends to: freed when the list grows again.)
    for line, (size, count) in live_now.items():
        assert allocated[line][0] >= size and allocated[line][1] >= count, line
    assert allocated[lines["big"]][0] >= 5 * 200_000
    churn_bytes, churn_count = allocated[lines["churn"]]
    assert churn_count == 2 * 5  # each bytearray: the object and its buffer
    assert churn_bytes >= 5 * 3_000_000
    assert live_now.get(lines["churn"], (0, 0))[0] < 3_000_000


def test_keys_cycle_views_and_scroll_within_the_sites() -> None:
    state = ViewState(sites_count=30, page=10)
    assert state.key("\t") is KeyAction.REDRAW and state.view is SiteView.ALLOCATED
    state.key("\t")
    assert state.view is SiteView.BY_FILE
    state.key("\t")
    assert state.view is SiteView.LIVE
    state.key(curses.KEY_NPAGE)
    assert state.scroll == 10
    state.key(curses.KEY_END)
    assert state.scroll == 20  # the last page: sites 20 to 29
    state.key("j")
    assert state.scroll == 20
    state.key(curses.KEY_PPAGE)
    assert state.scroll == 10
    state.key("a")  # another view starts at its top
    assert (state.view, state.scroll) == (SiteView.ALLOCATED, 0)
    state.key("k")
    assert state.scroll == 0
    assert state.key("x") is KeyAction.NONE
    assert state.key(curses.KEY_RESIZE) is KeyAction.REDRAW
    assert state.key("q") is KeyAction.QUIT
