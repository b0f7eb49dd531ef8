"""Runs CPython's ``test.test_tracemalloc`` in this interpreter and logs each outcome.

Started by ``run_cpython_tracemalloc.py``; not meant to be run by hand.

``suite_driver.py list``
    prints the test ids (``Class.method``) of the interpreter's own test module as JSON.
``suite_driver.py run --backend NAME --events FILE [ID ...]``
    checks that the startup shim substituted backend NAME for ``_tracemalloc``,
    runs the given tests (all when none are given) with the usual verbose
    unittest output, and appends one JSON object per line to FILE:
    ``{"event": "start", "id": ...}`` before a test, ``{"event": "stop", "id": ...,
    "outcome": ..., "details": ...}`` after it, ``{"event": "done"}`` at the end.
    Lines are flushed at once, so the runner can tell which test was running
    when a crash or a hang ended the process.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
import unittest
from collections.abc import Callable, Iterator
from typing import Any, TextIO

TEST_MODULE = "test.test_tracemalloc"

#: CPython runs this suite under regrtest (``python -m test``), where a test method runs
#: 22 frames deep in a ``-j`` worker (26 in-process, 16 under ``python -m unittest``), and
#: test_snapshot depends on it: it asserts that the second trace of a snapshot has more
#: than 10 frames in all, and some traces are made a few frames above the test method.
#: This driver's own stack is 8 frames shallower than a regrtest worker's, so it runs
#: the suite under that many extra frames, whatever the backend.
STACK_PADDING = 8

#: outcome severity: the worst one seen for a test (subtests included) wins
SEVERITY: dict[str, int] = {
    "passed": 0,
    "expected_failure": 0,
    "skipped": 1,
    "unexpected_success": 2,
    "failed": 3,
    "error": 4,
}


def short_id(test: unittest.TestCase) -> str:
    """``TestCAPI.test_track`` for ``test.test_tracemalloc.TestCAPI.test_track``."""
    test_id = test.id()
    prefix = TEST_MODULE + "."
    return test_id.removeprefix(prefix)


def iter_tests(suite: unittest.TestSuite) -> Iterator[unittest.TestCase]:
    """The test cases of *suite*, flattened, in run order."""
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from iter_tests(item)
        else:
            yield item


def format_error(err: Any) -> str:
    """The traceback text of an ``exc_info`` triple."""
    return "".join(traceback.format_exception(*err))


class EventLog:
    """Appends JSON lines to a file, flushing each one."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, **event: Any) -> None:
        self._stream.write(json.dumps(event) + "\n")
        self._stream.flush()


class RecordingResult(unittest.TextTestResult):
    """A verbose text result that also logs one outcome per test to an EventLog."""

    events: EventLog  # set by the runner class below

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._outcome = "passed"
        self._details: list[str] = []

    def _note(self, outcome: str, detail: str | None = None) -> None:
        if SEVERITY[outcome] > SEVERITY[self._outcome]:
            self._outcome = outcome
        if detail:
            self._details.append(detail)

    def startTest(self, test: unittest.TestCase) -> None:
        self._outcome, self._details = "passed", []
        self.events.write(event="start", id=short_id(test))
        super().startTest(test)

    def stopTest(self, test: unittest.TestCase) -> None:
        super().stopTest(test)
        self.events.write(
            event="stop", id=short_id(test), outcome=self._outcome, details=self._details
        )

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addFailure(test, err)
        self._note_error(test, "failed", err)

    def addError(self, test: unittest.TestCase, err: Any) -> None:
        super().addError(test, err)
        self._note_error(test, "error", err)

    def _note_error(self, test: unittest.TestCase, outcome: str, err: Any) -> None:
        detail = format_error(err)
        if isinstance(test, unittest.TestCase):
            self._note(outcome, detail)
        else:  # a setUpClass/setUpModule failure: unittest passes an _ErrorHolder
            self.events.write(event="stop", id=test.id(), outcome=outcome, details=[detail])

    def addSubTest(self, test: unittest.TestCase, subtest: Any, err: Any) -> None:
        super().addSubTest(test, subtest, err)
        if err is not None:
            failed = issubclass(err[0], test.failureException)
            self._note(
                "failed" if failed else "error",
                f"{subtest.id()}\n{format_error(err)}",
            )

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        super().addSkip(test, reason)
        self._note("skipped", f"skipped: {reason}")

    def addExpectedFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addExpectedFailure(test, err)
        self._note("expected_failure")

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:
        super().addUnexpectedSuccess(test)
        self._note("unexpected_success", "unexpected success")


def load(ids: list[str]) -> unittest.TestSuite:
    """The whole test module, or the tests named by short *ids*, in module order."""
    loader = unittest.TestLoader()
    if not ids:
        return loader.loadTestsFromName(TEST_MODULE)
    return loader.loadTestsFromNames([f"{TEST_MODULE}.{test_id}" for test_id in ids])


def call_at_depth(padding: int, function: Callable[[], object]) -> None:
    """Call *function* under *padding* extra stack frames (see STACK_PADDING)."""
    if padding > 0:
        call_at_depth(padding - 1, function)
    else:
        function()


def check_substitution(backend: str) -> None:
    """Exit with status 3 unless the shim put *backend* in place of ``_tracemalloc``."""
    import memtape_cpython_shim

    substitute = sys.modules.get("_tracemalloc")
    problem = None
    if memtape_cpython_shim.installed_backend() != backend:
        problem = f"the shim installed {memtape_cpython_shim.installed_backend()!r}"
    elif substitute is None or getattr(substitute.__spec__, "origin", None) == "built-in":
        problem = f"sys.modules['_tracemalloc'] is {substitute!r}"
    else:
        import tracemalloc

        if getattr(tracemalloc, "_get_traces", None) is not substitute._get_traces:
            problem = "tracemalloc did not bind the substitute's functions"
    if problem:
        sys.stderr.write(f"suite_driver: {backend} backend not substituted: {problem}\n")
        sys.exit(3)


def run(backend: str, events_path: str, ids: list[str]) -> None:
    check_substitution(backend)
    suite = load(ids)
    with open(events_path, "a", encoding="utf-8") as stream:
        RecordingResult.events = EventLog(stream)
        print(f"suite_driver: {TEST_MODULE} from {sys.modules[TEST_MODULE].__file__}", flush=True)
        runner = unittest.TextTestRunner(
            stream=sys.stdout, verbosity=2, resultclass=RecordingResult
        )
        call_at_depth(STACK_PADDING, lambda: runner.run(suite))
        RecordingResult.events.write(event="done")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list")
    run_parser = commands.add_parser("run")
    run_parser.add_argument("--backend", required=True)
    run_parser.add_argument("--events", required=True)
    run_parser.add_argument("ids", nargs="*")
    args = parser.parse_args(argv)
    if args.command == "list":
        print(json.dumps([short_id(test) for test in iter_tests(load([]))]))
    else:
        run(args.backend, args.events, args.ids)


if __name__ == "__main__":
    main(sys.argv[1:])
