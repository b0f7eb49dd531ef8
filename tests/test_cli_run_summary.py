"""``memtape run``'s end-of-run summary is analyzed while the program runs.

A process of memtape's own (the summary process) reads the capture file block by block
as it is written, so the summary at the end does not read the whole file again, and the
analysis' tables are not the traced process' memory. What it prints must be exactly what
reading the finished file prints, and nothing it does may be recorded as the program's.
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
    # A thread of memtape's own analyzing the capture in this process, if any.
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/comm") as f:
            if f.read().strip() == "memtape-summary":
                return "here"
    return None

def summary_process():
    # The process analyzing this one's capture: its nice value, whether it is a child of
    # this process, and whether it shares its process group; None when there is none.
    tag = f"memtape-run-summary-of-{os.getpid()}".encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if tag not in f.read().split(b"\\0"):
                    continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ppid, pgid, nice = int(fields[1]), int(fields[2]), int(fields[16])
        child = "a child" if ppid == os.getpid() else "no child"
        group = "our group" if pgid == os.getpgid(0) else "its own group"
        return f"{nice}, {child}, {group}"
    return None

kept = []
for size in (50_000, 150_000, 400_000, 100_000):
    block = [str(i) * 3 for i in range(size)]
    kept.append([(i, i * 0.5) for i in range(size // 10)])
    time.sleep(0.1)
    del block
print("summary thread", summary_thread())
print("summary process", summary_process())
"""

IN_A_PROCESS_OF_ITS_OWN = "summary thread None\nsummary process 10, no child, its own group\n"


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


def test_the_summary_process_runs_with_the_program_and_not_with_quiet(tmp_path: Path) -> None:
    script = write_program(tmp_path / "phases.py", PHASES)
    loud = ok(memtape("run", "-o", tmp_path / "loud.mtape", script))
    # Niced, so that on a busy machine it yields to the program; no child of the
    # program's, and out of its process group (a Ctrl-C at the terminal is the program's).
    assert loud.stdout == IN_A_PROCESS_OF_ITS_OWN, describe(loud)
    quiet = ok(memtape("run", "-q", "-o", tmp_path / "quiet.mtape", script))
    assert quiet.stdout == "summary thread None\nsummary process None\n", describe(quiet)


def test_the_analysis_memory_is_not_the_traced_process(tmp_path: Path) -> None:
    # 2.4 million live small blocks: replaying them takes tens of MiB of tables, which
    # made in the traced process counted as memtape's own there (38 MiB, against 115 MiB
    # recorded). memtape's own is then its capture buffers alone, whatever the live set.
    script = write_program(
        tmp_path / "rows.py",
        "import time\nkeep = [(i, str(i)) for i in range(800_000)]\ntime.sleep(0.3)\n",
    )
    capture = tmp_path / "rows.mtape"
    run = ok(memtape("run", "-o", capture, script))
    assert "memtape: peak " in run.stderr and "rows.py:2 in <module>" in run.stderr
    stats = read_json("stats", capture)
    # The 800,000 rows and their ints and strings: 109-116 MiB, by CPython version.
    assert 80 << 20 < stats["peak"]["bytes"] < 140 << 20, stats["peak"]
    own = stats["rss"]["memtape_own_bytes"]
    assert 0 < own < stats["peak"]["bytes"] // 8, (own, stats["peak"])


def test_a_program_waiting_for_all_its_children_does_not_wait_for_the_summary(
    tmp_path: Path,
) -> None:
    script = write_program(
        tmp_path / "reaper.py",
        "import os\n"
        "try:\n    print(os.wait())\nexcept ChildProcessError:\n    print('no children')\n",
    )
    run = ok(memtape("run", "-o", tmp_path / "reaper.mtape", script))
    assert run.stdout == "no children\n", describe(run)
    assert "top sites at the peak" in run.stderr, describe(run)


def test_the_summary_is_what_reading_the_finished_file_prints(tmp_path: Path) -> None:
    script = write_program(tmp_path / "phases.py", PHASES)
    capture = tmp_path / "phases.mtape"
    run = ok(memtape("run", "-o", capture, script))
    summary = run.stderr[run.stderr.index("memtape: peak ") :]
    fresh = summary_from_the_file(capture)
    assert fresh == summary, (fresh, summary)
    assert "top sites at the peak" in summary and "phases.py" in summary, summary


def test_the_summary_process_is_not_recorded(tmp_path: Path) -> None:
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
def test_the_summary_process_serves_every_way_out(tmp_path: Path, tail: str) -> None:
    # os._exit and an unhandled SIGTERM finish the capture from inside the program: the
    # summary comes from the summary process there too, and the status is python's.
    script = write_program(tmp_path / "out.py", "import signal\n" + PHASES + tail)
    capture = tmp_path / "out.mtape"
    run = memtape("run", "-o", capture, script)
    plain = python(script)
    assert run.returncode == plain.returncode, describe(run)
    assert IN_A_PROCESS_OF_ITS_OWN in run.stdout, describe(run)
    summary = run.stderr[run.stderr.index("memtape: peak ") :]
    assert summary_from_the_file(capture) == summary
