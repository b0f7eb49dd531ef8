"""Crash safety of ``memtape run``: a program killed by SIGKILL leaves a capture that
reads (saying it was cut short) with what was recorded before the kill; a forked child
does not touch its parent's capture.

No sleeps decide anything: a program waits until its own capture file has grown (the
recorder flushed a block written after the allocations that matter) before it is killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from child_python import child_env, describe
from memtape_cli import Site, memtape, ok, read_json, sites, write_program
from source_lines import line_of

LOOP_BLOCKS, LOOP_BYTES = 300, 10_000

# argv[1]: the capture file; argv[2]: "self" (the program kills itself) or a marker file
# to create once the capture holds the loop (the test then kills the program).
KILLED = f"""
import os
import signal
import sys
import time

capture, how = sys.argv[1], sys.argv[2]
keep = []


def flushed_after(size):
    # Waits (allocating, so that there is something to flush) until the recorder wrote
    # another block to the capture file.
    while os.path.getsize(capture) <= size:
        keep.append(bytearray(16))
        time.sleep(0.005)


for i in range({LOOP_BLOCKS}):
    keep.append(bytearray({LOOP_BYTES}))  # @tm:loop
# Twice: the loop's stacks are resolved by the time the second block is written.
flushed_after(os.path.getsize(capture))
flushed_after(os.path.getsize(capture))
if how == "self":
    os.kill(os.getpid(), signal.SIGKILL)
open(how, "w").close()
while True:
    keep.append(bytearray(100))  # @tm:waiting
    time.sleep(0.01)
"""


def check_cut_short_capture(script: Path, capture: Path) -> None:
    stats = memtape("stats", capture)
    ok(stats)
    assert "was cut short" in stats.stderr, describe(stats)
    summary = read_json("stats", capture)
    assert summary["run"]["cut_short"] is True
    top = Site.of(summary["top"][0])
    assert top.at(script, line_of(script, "loop")), top
    assert top.bytes >= LOOP_BLOCKS * LOOP_BYTES and top.count >= LOOP_BLOCKS, top
    at_end = sites(read_json("top", capture, "--at", "end")["sites"])
    assert at_end[0].at(script, line_of(script, "loop")), at_end[0]


def test_sigkill_by_the_program_itself(tmp_path: Path) -> None:
    script = write_program(tmp_path / "killed.py", KILLED)
    capture = tmp_path / "killed.mtape"
    result = memtape("run", "-q", "-o", capture, script, capture, "self", timeout=60)
    assert result.returncode == -signal.SIGKILL, describe(result)
    check_cut_short_capture(script, capture)


def test_sigkill_from_outside(tmp_path: Path) -> None:
    script = write_program(tmp_path / "killed.py", KILLED)
    capture, ready = tmp_path / "killed.mtape", tmp_path / "ready"
    argv = [sys.executable, "-m", "memtape", "run", "-q", "-o", str(capture), str(script)]
    proc = subprocess.Popen(
        [*argv, str(capture), str(ready)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ready.exists(), f"the program never got ready (exit {proc.poll()})"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, out, err)
    check_cut_short_capture(script, capture)


FORKS = """
import os
import sys

keep = [bytearray(300_000)]  # @tm:before
pid = os.fork()
if pid == 0:
    junk = [bytearray(100_000) for _ in range(40)]  # @tm:child
    {child_exit}
_, status = os.waitpid(pid, 0)
keep.append(bytearray(400_000))  # @tm:after
print("child exited", os.waitstatus_to_exitcode(status))
"""


def check_parent_capture(script: Path, capture: Path) -> None:
    stats = memtape("stats", capture)
    ok(stats)
    assert stats.stderr == "", describe(stats)
    summary = read_json("stats", capture)
    assert summary["run"]["cut_short"] is False and summary["run"]["exit"] == "normal"
    at_end = sites(read_json("top", capture, "--at", "end", "--limit", "1000")["sites"])
    lines = {s.line for s in at_end if s.filename == str(script)}
    assert {line_of(script, "before"), line_of(script, "after")} <= lines, at_end
    # The child's 4 MB were the child's, not the parent's.
    assert line_of(script, "child") not in lines
    assert summary["peak"]["bytes"] < 4_000_000


def test_forked_child_exiting_with_os_exit(tmp_path: Path) -> None:
    script = write_program(tmp_path / "forks.py", FORKS.format(child_exit="os._exit(0)"))
    capture = tmp_path / "forks.mtape"
    result = memtape("run", "-q", "-o", capture, script)
    ok(result)
    assert result.stdout == "child exited 0\n"
    check_parent_capture(script, capture)


def test_forked_child_exiting_like_a_program(tmp_path: Path) -> None:
    """A child that leaves through ``sys.exit(0)`` unwinds through ``memtape run``: it
    must exit 0 quietly, leaving the capture (and its summary) to the parent."""
    script = write_program(tmp_path / "forks.py", FORKS.format(child_exit="sys.exit(0)"))
    capture = tmp_path / "forks.mtape"
    result = memtape("run", "-o", capture, script)
    assert result.returncode == 0 and result.stdout == "child exited 0\n", describe(result)
    assert "Traceback" not in result.stderr, describe(result)
    assert result.stderr.count("memtape: recorded") == 1, describe(result)
    check_parent_capture(script, capture)
