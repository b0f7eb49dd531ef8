"""Where one dump_snapshot's time goes: wall time, process CPU (user, system) and the
calling thread's own CPU for each of several pickle dumps of framework_api.py's
recording (1,000,000 events), the first to a new file and the others over it.

Usage: python benchmarks/dump_snapshot_cpu.py [--events N] [--dumps N]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import memtape
from framework_api import record_churn


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--dumps", type=int, default=5)
    args = p.parse_args()
    kept = record_churn(args.events)
    walls, cpus, own = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "snap.pickle")
        print(f"{kept:,} events: wall s, user s, sys s, calling thread's CPU s")
        for n in range(args.dumps):
            proc0 = resource.getrusage(resource.RUSAGE_SELF)
            thread0 = resource.getrusage(resource.RUSAGE_THREAD)
            t0 = time.perf_counter()
            memtape.dump_snapshot(path, format="pickle")
            wall = time.perf_counter() - t0
            proc1 = resource.getrusage(resource.RUSAGE_SELF)
            thread1 = resource.getrusage(resource.RUSAGE_THREAD)
            user, system = proc1.ru_utime - proc0.ru_utime, proc1.ru_stime - proc0.ru_stime
            calling = (thread1.ru_utime - thread0.ru_utime) + (thread1.ru_stime - thread0.ru_stime)
            walls.append(wall)
            cpus.append(user + system)
            own.append(calling)
            what = "new file" if n == 0 else "over it"
            print(f"  {what:<8} {wall:6.3f} {user:6.3f} {system:6.3f} {calling:6.3f}")
        mib = os.path.getsize(path) / 2**20
    print(
        f"median: wall {statistics.median(walls):.3f} s, CPU {statistics.median(cpus):.3f} s, "
        f"calling thread {statistics.median(own):.3f} s; {mib:.1f} MiB; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
