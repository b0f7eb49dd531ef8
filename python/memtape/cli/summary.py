"""What `memtape run` prints when the program ends."""

from __future__ import annotations

import sys


def print_run_summary(path: str, events: int, size: int) -> None:
    """Where the capture is and how to read it (on stderr: stdout is the program's)."""
    err = sys.stderr
    print(f"\nmemtape: recorded {events:,} events into {path} ({size / 2**20:.1f} MiB)", file=err)
    print(f"  memtape stats {path}", file=err)
    print(f"  memtape report {path} -o report.html", file=err)
