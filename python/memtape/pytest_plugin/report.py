"""The ``--memtape`` report at the end of the session.

Each recorded test's numbers travel on its call report (``report.memtape``, a JSON-able
dict), so that under pytest-xdist the controller reports what the workers measured."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pytest

from memtape.byte_size import format_size
from memtape.pytest_plugin.measure import BodyMemory


def payload(body: BodyMemory) -> dict[str, Any]:
    """What a test's call report carries to the report."""
    sites = [
        [s.bytes, *(s.frames[0] if s.frames else ("?", "?", 0))]
        for s in body.peak_sites[:3]
        if s.bytes * 100 >= body.peak
    ]
    return {
        "peak": body.peak,
        "allocated": body.allocated,
        "allocations": body.allocations,
        "sites": sites,
        "worker": os.environ.get("PYTEST_XDIST_WORKER", ""),
    }


@dataclass(frozen=True)
class TestMemory:
    """One test's recorded numbers."""

    __test__ = False  # not a test class, for pytest's collection

    nodeid: str
    data: dict[str, Any]

    @property
    def peak(self) -> int:
        return int(self.data["peak"])


def write_report(
    tr: pytest.TerminalReporter,
    tests: list[TestMemory],
    most: int,
    verbosity: int,
    kept_in: str | None,
) -> None:
    """The tests with the highest body peak; ``-q``: one line; ``-v``: their top sites;
    under pytest-xdist, each worker's highest peak too."""
    tr.write_sep("=", "memtape report")
    if not tests:
        tr.write_line("no test was recorded")
        return
    tests = sorted(tests, key=lambda t: t.peak, reverse=True)
    top = tests[0]
    tr.write_line(
        f"{len(tests)} tests recorded; highest peak {format_size(top.peak)} in {top.nodeid}"
    )
    workers: dict[str, int] = {}
    for t in tests:
        if t.data["worker"]:
            workers[t.data["worker"]] = max(workers.get(t.data["worker"], 0), t.peak)
    if workers:
        shown_workers = ", ".join(f"{w} {format_size(p)}" for w, p in sorted(workers.items()))
        tr.write_line(f"highest peak per worker: {shown_workers}")
    if verbosity < 0:
        return
    shown = tests if most <= 0 else tests[:most]
    tr.write_line(
        f"{len(shown)} of {len(tests)} tests, highest peak first (the test function's call; "
        "fixtures apart):"
    )
    for t in shown:
        d = t.data
        tr.write_line(
            f"  {t.nodeid}: peak {format_size(d['peak'])}, "
            f"allocated {format_size(d['allocated'])} in {d['allocations']:,} blocks"
        )
        if verbosity > 0:
            for size, filename, function, line in d["sites"]:
                tr.write_line(f"      {format_size(size)} at {filename}:{line} in {function}")
    if kept_in is not None:
        tr.write_line(f"captures kept in {kept_in} (read them with memtape stats/top/report)")
