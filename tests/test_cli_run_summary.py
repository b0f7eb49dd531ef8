"""``memtape run``'s end-of-run summary is analyzed while the program runs.

A thread of memtape's own ("memtape-summary") reads the capture file block by block as
it is written, so the summary at the end does not read the whole file again. What it
prints must be exactly what reading the finished file prints, and nothing the thread
allocates may be recorded as the program's (``memtape run`` follows the native heap).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from child_python import describe
from memtape_cli import memtape, ok, python, read_json, write_program

# Phases that grow and shrink the heap, with pauses so that the flusher writes many
# blocks while the program runs (it flushes every 25 ms); the peak is in the middle.
PHASES = """
import os, time

def summary_thread():
    # The summary thread's nice value and whether it blocks SIGTERM (memtape's threads
    # take no asynchronous signal), or None when there is no such thread.
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/comm") as f:
            if f.read().strip() == "memtape-summary":
                with open(f"/proc/self/task/{task}/stat") as f:
                    nice = int(f.read().rsplit(")", 1)[1].split()[16])
                with open(f"/proc/self/task/{task}/status") as f:
                    status = dict(line.split(":\t", 1) for line in f)
                blocked = int(status["SigBlk"], 16) >> (15 - 1) & 1
                return f"{nice} {'blocks' if blocked else 'takes'} SIGTERM"
    return None

kept = []
for size in (50_000, 150_000, 400_000, 100_000):
    block = [str(i) * 3 for i in range(size)]
    kept.append([(i, i * 0.5) for i in range(size // 10)])
    time.sleep(0.1)
    del block
print("summary thread", summary_thread())
"""


def summary_from_the_file(capture: Path) -> str:
    """The summary printed from the finished file by another process (no follower),
    from its peak line on."""
    fresh = ok(
        python(
            "-c",
            "from memtape.cli.summary import print_run_summary\n"
            f"print_run_summary({str(capture)!r}, 0, 0)\n",
        )
    )
    return fresh.stderr[fresh.stderr.index("memtape: peak ") :]


def test_the_summary_thread_runs_with_the_program_and_not_with_quiet(tmp_path: Path) -> None:
    script = write_program(tmp_path / "phases.py", PHASES)
    loud = ok(memtape("run", "-o", tmp_path / "loud.mtape", script))
    # Niced, so that on a busy machine it yields to the program.
    assert loud.stdout == "summary thread 10 blocks SIGTERM\n", describe(loud)
    quiet = ok(memtape("run", "-q", "-o", tmp_path / "quiet.mtape", script))
    assert quiet.stdout == "summary thread None\n", describe(quiet)


def test_the_summary_is_what_reading_the_finished_file_prints(tmp_path: Path) -> None:
    script = write_program(tmp_path / "phases.py", PHASES)
    capture = tmp_path / "phases.mtape"
    run = ok(memtape("run", "-o", capture, script))
    summary = run.stderr[run.stderr.index("memtape: peak ") :]
    fresh = summary_from_the_file(capture)
    assert fresh == summary, (fresh, summary)
    assert "top sites at the peak" in summary and "phases.py" in summary, summary


def test_the_summary_threads_memory_is_not_the_programs(tmp_path: Path) -> None:
    # Enough live Python blocks that the analysis' own tables take megabytes; the program
    # itself allocates next to nothing natively.
    script = write_program(
        tmp_path / "many.py",
        "import time\nkeep = [(i, str(i)) for i in range(300_000)]\ntime.sleep(0.2)\n",
    )
    capture = tmp_path / "many.mtape"
    ok(memtape("run", "-o", capture, script))
    stats = read_json("stats", capture)
    native = stats["end"]["by_source"]["native"]
    assert native < 1 << 20, stats["end"]


@pytest.mark.parametrize(
    "tail",
    ["os._exit(3)\n", "os.kill(os.getpid(), signal.SIGTERM)\ntime.sleep(30)\n"],
    ids=["os._exit", "SIGTERM"],
)
def test_the_summary_thread_serves_every_way_out(tmp_path: Path, tail: str) -> None:
    # os._exit and an unhandled SIGTERM finish the capture from inside the program: the
    # summary comes from the thread there too, and the status is python's.
    script = write_program(tmp_path / "out.py", "import signal\n" + PHASES + tail)
    capture = tmp_path / "out.mtape"
    run = memtape("run", "-o", capture, script)
    plain = python(script)
    assert run.returncode == plain.returncode, describe(run)
    assert "summary thread 10 blocks SIGTERM" in run.stdout, describe(run)
    summary = run.stderr[run.stderr.index("memtape: peak ") :]
    assert summary_from_the_file(capture) == summary
