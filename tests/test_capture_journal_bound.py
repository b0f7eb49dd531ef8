"""A capture's journal stays bounded when its flusher falls behind.

The hooks append each event to a journal that the capture's flusher thread takes and
writes every few milliseconds. On a busy machine the flusher may get a small share of a
CPU; the journal then grew for as long as the program ran, tens of MiB in the traced
process. Now a recording thread waits for the flusher once the journal holds a few MiB.
Here the flusher is starved for real: every thread of the program on one CPU, the
flusher at the lowest priority.
"""

from __future__ import annotations

from pathlib import Path

from child_python import describe
from memtape_cli import memtape, ok, read_json, write_program

MiB = 2**20

STARVED_FLUSHER = """
import os

def comm(tid):
    with open(f"/proc/self/task/{tid}/comm") as f:
        return f.read().strip()

cpu = min(os.sched_getaffinity(0))
tids = [int(t) for t in os.listdir("/proc/self/task")]
for tid in tids:
    os.sched_setaffinity(tid, {cpu})
flushers = [tid for tid in tids if comm(tid) == "memtape-flusher"]
for tid in flushers:
    os.setpriority(os.PRIO_PROCESS, tid, 19)
print("flushers starved:", len(flushers))
keep = [(i, str(i)) for i in range(500_000)]
"""


def test_a_starved_flusher_holds_the_journal_to_a_few_mib(tmp_path: Path) -> None:
    script = write_program(tmp_path / "starved.py", STARVED_FLUSHER)
    capture = tmp_path / "starved.mtape"
    run = ok(memtape("run", "-q", "-o", capture, script))
    assert run.stdout == "flushers starved: 1\n", describe(run)
    stats = read_json("stats", capture)
    # About 1.5 million blocks live at the end (the rows, their ints and strings; a newer
    # CPython keeps a few more small ones cached: 1,498,927 on 3.15): nothing is lost to
    # the bound.
    assert stats["peak"]["blocks"] >= 1_498_000, stats["peak"]
    # Two journals of at most 3.1 MiB each, the writer's buffers, the stacks: well under
    # 16 MiB (unbounded, the journal alone took tens of MiB here).
    own = stats["rss"]["memtape_own_bytes"]
    assert 0 < own < 16 * MiB, own
