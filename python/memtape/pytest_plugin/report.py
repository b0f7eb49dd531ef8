"""The ``--memtape`` report at the end of the session."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from memtape.pytest_plugin.measure import PhaseMemory
from memtape.pytest_plugin.sizes import format_size


@dataclass(frozen=True)
class TestMemory:
    """One test's recorded phases."""

    __test__ = False  # not a test class, for pytest's collection

    nodeid: str
    setup: PhaseMemory | None
    body: PhaseMemory


def write_report(
    tr: pytest.TerminalReporter,
    tests: list[TestMemory],
    most: int,
    verbosity: int,
    kept_in: str | None,
) -> None:
    """The tests with the highest body peak; ``-q``: one line; ``-v``: their top sites."""
    tr.write_sep("=", "memtape report")
    if not tests:
        tr.write_line("no test was recorded")
        return
    tests = sorted(tests, key=lambda t: t.body.peak, reverse=True)
    top = tests[0]
    if verbosity < 0:
        tr.write_line(
            f"{len(tests)} tests recorded; highest peak {format_size(top.body.peak)} "
            f"in {top.nodeid}"
        )
        return
    shown = tests if most <= 0 else tests[:most]
    tr.write_line(f"{len(shown)} of {len(tests)} tests, highest peak first (body; setup apart):")
    for t in shown:
        setup = f", setup peak {format_size(t.setup.peak)}" if t.setup is not None else ""
        tr.write_line(
            f"  {t.nodeid}: peak {format_size(t.body.peak)}, "
            f"allocated {format_size(t.body.allocated)} in {t.body.allocations:,} blocks{setup}"
        )
        if verbosity > 0:
            for site in [s for s in t.body.peak_sites[:3] if s.bytes * 100 >= t.body.peak]:
                filename, function, line = site.frames[0] if site.frames else ("?", "?", 0)
                tr.write_line(f"      {format_size(site.bytes)} at {filename}:{line} in {function}")
    if kept_in is not None:
        tr.write_line(f"captures kept in {kept_in} (read them with memtape stats/top/report)")
