"""``memtape attach --live PID`` driven in tmux as a user would: the view shows the line
the running target allocates on after the attach, and ``q`` detaches, leaving the target
running exactly as before (checked from inside it) and the capture complete."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from attach_scenario import Target, alloc_line
from tmux_pane import Pane

# The interpreter under the test's virtual environment: no memtape installed in it.
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)


def exit_status(pane: Pane) -> int:
    text = pane.wait_for(lambda t: "EXIT=" in t, "exit status")
    return int(text.split("EXIT=", 1)[1].split()[0])


def test_attach_live_shows_the_targets_line_and_q_detaches(tmp_path: Path) -> None:
    target = Target(BASE_PYTHON, tmp_path / "target")
    pane = None
    try:
        before = target.check()
        capture = tmp_path / "attached.mtape"
        pane = Pane(
            tmp_path,
            ["attach", "--live", str(target.pid), "-o", str(capture)],
            width=110,
            height=30,
        )
        pane.wait_for(lambda t: "live now" in t, "live view")
        assert "memory allocated before the attach is not attributed" in pane.text()
        target.send("alloc")
        site = f"target.py:{alloc_line()} in <module>"
        text = pane.wait_for(lambda t: site in t, f"the target's line ({site})")
        assert "q detaches" in text or "detaches" in text
        during = target.check()
        assert "memtape-attach" in during["threads"]
        pane.keys("q")
        assert exit_status(pane) == 0
        # Detached: memtape's thread and hooks are gone; the target goes on serving.
        after = target.check()
        assert after["threads"] == before["threads"] == ["MainThread"]
        assert after["allocators_as_at_start"]
        target.send("alloc")
        end = target.finish()
        assert end["returncode"] == 3
        assert end["stdout"] == "started\nallocated\nallocated\nbye\n"
    finally:
        if pane is not None:
            pane.close()
        target.kill()
    stats = subprocess.run(
        [sys.executable, "-m", "memtape", "stats", "--json", str(capture)],
        capture_output=True,
        text=True,
        check=True,
    )
    run = json.loads(stats.stdout)["run"]
    assert run["exit"] == "detached" and not run["cut_short"]


def test_attach_live_without_a_terminal_attaches_nothing(tmp_path: Path) -> None:
    target = Target(BASE_PYTHON, tmp_path / "target")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "memtape", "attach", "--live", str(target.pid), "-o", "x.mtape"],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            cwd=tmp_path,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2, done
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("memtape attach: "), (
            done.stderr
        )
        assert not (tmp_path / "x.mtape").exists()
        check = target.check()
        assert check["threads"] == ["MainThread"] and check["allocators_as_at_start"]
        assert not check["memtape_imported"]
    finally:
        target.kill()
