"""Bad arguments raise what the stdlib raises: same exception type and message."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

Outcome = tuple[type[BaseException], str]


def _raised(call: Callable[[], object]) -> Outcome:
    try:
        call()
    except Exception as exc:
        return type(exc), str(exc)
    raise AssertionError("no exception raised")


def _taken_snapshot(module: ModuleType) -> Any:
    module.start(1)
    try:
        return module.take_snapshot()
    finally:
        module.stop()


# Each case calls the API of a module `m`; `s` is a snapshot taken by that module.
SNAPSHOT_CASES: dict[str, Callable[[ModuleType, Any], object]] = {
    "statistics-unknown-key": lambda m, s: s.statistics("bogus"),
    "statistics-key-none": lambda m, s: s.statistics(None),
    "statistics-cumulative-traceback": lambda m, s: s.statistics("traceback", cumulative=True),
    "compare-unknown-key": lambda m, s: s.compare_to(s, "bogus"),
    "compare-cumulative-traceback": lambda m, s: s.compare_to(s, "traceback", True),
    "filter-traces-int": lambda m, s: s.filter_traces(5),
    "filter-traces-none": lambda m, s: s.filter_traces(None),
    "filter-set-pattern": lambda m, s: setattr(m.Filter(True, "x.py"), "filename_pattern", "y"),
    "domain-filter-set-domain": lambda m, s: setattr(m.DomainFilter(True, 1), "domain", 2),
    "frame-set-filename": lambda m, s: setattr(m.Frame(("a.py", 1)), "filename", "b.py"),
    "frame-set-lineno": lambda m, s: setattr(m.Frame(("a.py", 1)), "lineno", 2),
    "frame-less-than-int": lambda m, s: m.Frame(("a.py", 1)) < 3,
    "traceback-set-total": lambda m, s: setattr(m.Traceback((("a.py", 1),)), "total_nframe", 3),
    "traceback-index": lambda m, s: m.Traceback((("a.py", 1),))[5],
    "trace-set-size": lambda m, s: setattr(m.Trace((0, 1, (("a.py", 1),), 1)), "size", 2),
    "statistic-new-attribute": lambda m, s: setattr(
        m.Statistic(m.Traceback((("a.py", 1),)), 1, 1), "extra", 1
    ),
}


@pytest.mark.parametrize("case", list(SNAPSHOT_CASES))
def test_snapshot_api_errors_match_the_reference(
    tm: ModuleType, stdlib_tm: ModuleType, case: str
) -> None:
    call = SNAPSHOT_CASES[case]
    expected = _raised(lambda: call(stdlib_tm, stdlib_tm.Snapshot([], 1)))
    snapshot = _taken_snapshot(tm)
    assert _raised(lambda: call(tm, snapshot)) == expected


def test_take_snapshot_requires_tracing(tm: ModuleType, stdlib_tm: ModuleType) -> None:
    expected = _raised(stdlib_tm.take_snapshot)
    assert expected == (
        RuntimeError,
        "the tracemalloc module must be tracing memory allocations to take a snapshot",
    )
    assert _raised(tm.take_snapshot) == expected
    tm.start(1)
    tm.stop()
    assert _raised(tm.take_snapshot) == expected


def test_documented_messages(tm: ModuleType) -> None:
    snapshot = _taken_snapshot(tm)
    assert _raised(lambda: snapshot.statistics("traceback", cumulative=True)) == (
        ValueError,
        "cumulative mode cannot by used with key type 'traceback'",
    )
    assert _raised(lambda: snapshot.statistics("bogus")) == (
        ValueError,
        "unknown key_type: 'bogus'",
    )
    assert _raised(lambda: snapshot.filter_traces(5)) == (
        TypeError,
        "filters must be a list of filters, not int",
    )


def test_get_object_traceback_needs_one_argument(tm: ModuleType) -> None:
    with pytest.raises(TypeError):
        tm.get_object_traceback()
    with pytest.raises(TypeError):
        tm.get_object_traceback(1, 2)


@pytest.mark.parametrize("name", ["stop", "is_tracing", "clear_traces", "get_traced_memory"])
def test_argumentless_functions_reject_arguments(tm: ModuleType, name: str) -> None:
    with pytest.raises(TypeError):
        getattr(tm, name)(1)


def test_load_of_a_missing_file(tm: ModuleType, stdlib_tm: ModuleType, tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.pickle")
    expected = _raised(lambda: stdlib_tm.Snapshot.load(missing))
    assert expected[0] is FileNotFoundError
    assert _raised(lambda: tm.Snapshot.load(missing)) == expected


def test_dump_to_a_directory(tm: ModuleType, stdlib_tm: ModuleType, tmp_path: Path) -> None:
    expected = _raised(lambda: stdlib_tm.Snapshot([], 1).dump(str(tmp_path)))
    snapshot = _taken_snapshot(tm)
    assert _raised(lambda: snapshot.dump(str(tmp_path))) == expected


@pytest.mark.parametrize(
    "content", [b"", b"not a pickle", b"\x80\x05\x95"], ids=["empty", "garbage", "truncated"]
)
def test_load_of_a_bad_file_raises_the_same_type(
    tm: ModuleType, stdlib_tm: ModuleType, tmp_path: Path, content: bytes
) -> None:
    # Only the type is compared: callers catch EOFError / pickle.UnpicklingError.
    path = tmp_path / "bad.pickle"
    path.write_bytes(content)
    expected_type, _ = _raised(lambda: stdlib_tm.Snapshot.load(str(path)))
    actual_type, message = _raised(lambda: tm.Snapshot.load(str(path)))
    assert actual_type is expected_type, message
