"""memtape's pytest plugin (registered through the ``pytest11`` entry point).

Each measured test's call is recorded into a capture of its own, with memtape's recorder:
the test function's own call only (``test_call``), not pytest's, pluggy's or memtape's work
around it, nor the fixtures' setup (as in pytest-memray). ``--memtape`` reports the tests
with the highest peak; the ``limit_memory`` and ``limit_leaks`` markers, and a default
limit for every test, fail the tests that go over, naming the sites responsible. With
pytest-memray installed too, the two markers are memray's unless ``--memtape`` is given.
"""

from __future__ import annotations

import gc
import hashlib
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Generator

import pytest

from memtape import _native
from memtape.cli.command_parser import whole_number
from memtape.pytest_plugin.checks import (
    LeakLimit,
    MarkerError,
    MemoryLimit,
    check_leaks,
    check_memory,
    leak_limit,
    memory_limit,
)
from memtape.pytest_plugin.measure import BodyMemory, Recording
from memtape.pytest_plugin.regression import DEFAULT_TOLERANCE, PeakBaseline, Tolerance
from memtape.pytest_plugin.report import TestMemory, payload, write_report
from memtape.pytest_plugin.sizes import parse_size
from memtape.pytest_plugin.test_call import runner_files, test_call_recorded
from memtape.pytest_plugin.xdist_worker import keep_receiver_unrecorded

__all__ = ["pytest_addoption", "pytest_configure"]

MARKERS = (
    "limit_memory(limit): fail the test when the peak memory of its body exceeds limit "
    "('24 MB'; memtape).",
    "limit_leaks(limit, *, filter_fn=None, warmups=0, repeat=1): fail the test when a stack "
    "keeps more than limit per run of the body, after warmups unmeasured runs (memtape).",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("memtape", "memory of each test, recorded by memtape")
    group.addoption("--memtape", action="store_true", help="record every test; report the top")
    group.addoption(
        "--memtape-most-allocations",
        type=whole_number(0),
        default=5,
        metavar="N",
        help="tests listed in the report, highest peak first (0: all; default 5)",
    )
    group.addoption(
        "--memtape-limit-memory",
        metavar="SIZE",
        help="a limit_memory for every test without its own (ini: memtape_limit_memory)",
    )
    group.addoption(
        "--memtape-stacks",
        type=whole_number(1),
        default=8,
        metavar="N",
        help="frames shown per allocation site in failures (default 8)",
    )
    group.addoption(
        "--memtape-bin-path",
        metavar="DIR",
        help="keep each test's captures in DIR (every memtape report reads them)",
    )
    group.addoption(
        "--memtape-fail-on-increase",
        action="store_true",
        help="fail a test whose peak rose above its last passing run's by more than the tolerance",
    )
    group.addoption(
        "--memtape-increase-tolerance",
        default=DEFAULT_TOLERANCE,
        metavar="TOL",
        help=f"how far a peak may rise: '10%%', '2 MB' or both (default '{DEFAULT_TOLERANCE}')",
    )
    group.addoption(
        "--memtape-no-native-heap",
        action="store_true",
        help="record the Python heap and NumPy only, not native (C, C++, Rust) malloc/mmap",
    )
    parser.addini("memtape_limit_memory", "a limit_memory for every test without its own")


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    config.pluginmanager.register(MemtapePlugin(config), "memtape-plugin")
    if getattr(config, "workerinput", None) is not None:  # a pytest-xdist worker
        keep_receiver_unrecorded()


class MemtapePlugin:
    """Records the tests that need it and checks their limits."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.report = bool(config.getoption("memtape"))
        default = config.getoption("memtape_limit_memory") or config.getini("memtape_limit_memory")
        try:
            self.default_limit = parse_size(default) if default else None
        except ValueError as exc:
            raise pytest.UsageError(f"--memtape-limit-memory: {exc}") from None
        self.frames = max(1, int(config.getoption("memtape_stacks")))
        self.native = not config.getoption("memtape_no_native_heap")
        bin_path = config.getoption("memtape_bin_path")
        self.keep = bin_path is not None
        self.dir = os.path.abspath(bin_path) if bin_path else tempfile.mkdtemp(prefix="memtape-")
        os.makedirs(self.dir, exist_ok=True)
        self.baseline: PeakBaseline | None = None
        if config.getoption("memtape_fail_on_increase"):
            if config.cache is None:
                raise pytest.UsageError("--memtape-fail-on-increase needs pytest's cache plugin")
            try:
                tolerance = Tolerance.parse(config.getoption("memtape_increase_tolerance"))
            except ValueError as exc:
                raise pytest.UsageError(f"--memtape-increase-tolerance: {exc}") from None
            self.baseline = PeakBaseline(config.cache, tolerance)
        # pytest-memray registers the same two markers: installed beside memtape, it keeps
        # them unless --memtape asks memtape to enforce them (-p no:memray: memtape's alone).
        self.memray = config.pluginmanager.hasplugin("memray")
        self.markers = self.report or not self.memray
        self.tests: dict[str, BodyMemory] = {}
        self.reported: list[TestMemory] = []
        self.broken: str | None = None
        self.series = False

    def _records(self, item: pytest.Item) -> bool:
        if self.broken is not None:
            return False
        return (
            self.report
            or self.keep
            or self.baseline is not None
            or self.default_limit is not None
            or (
                self.markers
                and (
                    item.get_closest_marker("limit_memory") is not None
                    or item.get_closest_marker("limit_leaks") is not None
                )
            )
        )

    def _start(self, item: pytest.Item, name: str) -> Recording | None:
        path = os.path.join(self.dir, f"{name}.call.mtape")
        if not self.series:
            # One test's capture after another: native memory's slots stay pointed at the
            # hooks between them (passing calls through), and the writer thread waits,
            # until the session ends.
            _native._capture_series(True)
            self.series = True
        try:
            return Recording(
                path,
                item.nodeid,
                native=self.native,
                runner_files=runner_files(self.config),
                keep=self.keep,
            )
        except (RuntimeError, OSError) as exc:
            self.broken = str(exc)
            warnings.warn(f"memtape cannot record the tests: {exc}", stacklevel=1)
            return None

    def pytest_report_header(self, config: pytest.Config) -> str | None:
        if self.memray and self.markers:
            return (
                "memtape: --memtape: memtape enforces limit_memory and limit_leaks; pytest-memray "
                "(installed too) enforces them as well and each sees a little of the other's "
                "work (-p no:memray leaves them to memtape alone)"
            )
        return None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        if not self._records(item):
            return (yield)
        bad_marker: str | None = None
        try:
            leaks = leak_limit(item) if self.markers else None
            memory = memory_limit(item, self.default_limit, marker=self.markers)
        except MarkerError as exc:
            bad_marker = str(exc)
        if bad_marker is not None:  # the test fails with this one line, the others run
            pytest.fail(bad_marker, pytrace=False)
        name = _file_name(item.nodeid)
        with test_call_recorded(item):
            for _ in range(leaks.warmups if leaks else 0):
                item.runtest()
            recording = self._start(item, name)
            if recording is None:
                return (yield)
            try:
                result = yield
                for _ in range((leaks.repeat if leaks else 1) - 1):
                    item.runtest()
                if leaks:
                    gc.collect()  # the body's cyclic garbage is not a leak
            finally:
                body = recording.stop(sites=10, leaks=leaks is not None)
                self.tests[item.nodeid] = body
        self._check(memory, leaks, body, name)
        return result

    def _check(
        self, memory: MemoryLimit | None, leaks: LeakLimit | None, body: BodyMemory, key: str
    ) -> None:
        failures = [
            message
            for message in (
                check_memory(memory, body, self.frames) if memory else None,
                check_leaks(leaks, body, self.frames) if leaks else None,
                self.baseline.check(key, body.peak) if self.baseline else None,
            )
            if message
        ]
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        body = self.tests.pop(item.nodeid, None) if call.when == "call" else None
        if body is not None:
            report.memtape = payload(body)  # type: ignore[attr-defined]
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Collects the numbers, here or from pytest-xdist's workers."""
        data = getattr(report, "memtape", None)
        if report.when == "call" and isinstance(data, dict):
            self.reported.append(TestMemory(report.nodeid, data))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.report:
            return
        write_report(
            terminalreporter,
            self.reported,
            int(self.config.getoption("memtape_most_allocations")),
            self.config.get_verbosity(),
            self.dir if self.keep else None,
        )
        if self.broken is not None:
            terminalreporter.write_line(f"memtape could not record the tests: {self.broken}")

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.series:
            _native._capture_series(False)
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def _file_name(nodeid: str) -> str:
    """A file name for a test id (``tests/t.py::test_a[x]`` → ``tests-t.py--test_a-x-``);
    long ids end in a hash instead, to stay within file name limits."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", nodeid)
    if len(name) > 150:
        name = name[:100] + "-" + hashlib.sha256(nodeid.encode()).hexdigest()[:16]
    return name
