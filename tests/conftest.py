"""Fixtures for the tracemalloc drop-in suites (tests/test_tm_*.py).

``tm`` is the module under test, parametrized over the stdlib ``tracemalloc`` (ids
``[stdlib]``) and ``memtape.tracemalloc`` (``[memtape]``): every expectation of a
compatibility test is first checked against the stdlib. ``memtape_tm`` is for tests that
only make sense for memtape. ``-k stdlib`` runs the stdlib half alone.

The stdlib reference is imported here, first, so that it is bound to the interpreter's
builtin ``_tracemalloc`` even if memtape later replaces that module. Every test_tm_* test
starts and ends with tracing stopped in both modules.
"""

from __future__ import annotations

import importlib
import sys
import tracemalloc as stdlib_tracemalloc
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from headless_chromium import ChromiumUnavailable, HeadlessChromium

IMPLEMENTATIONS = {"stdlib": "tracemalloc", "memtape": "memtape.tracemalloc"}
MEMTAPE_MODULE = IMPLEMENTATIONS["memtape"]


def stdlib_is_builtin() -> bool:
    """Whether the reference ``tracemalloc`` really runs on the builtin ``_tracemalloc``."""
    owner = getattr(getattr(stdlib_tracemalloc, "_get_traces", None), "__self__", None)
    spec = getattr(owner, "__spec__", None)
    return getattr(spec, "origin", None) == "built-in"


def import_memtape() -> ModuleType:
    """``memtape.tracemalloc``; a test that needs it fails when it cannot be imported
    (a broken build must never turn into skipped tests)."""
    try:
        return importlib.import_module(MEMTAPE_MODULE)
    except ImportError as exc:
        pytest.fail(f"{MEMTAPE_MODULE} is not importable: {exc!r}")


def _loaded_tracers() -> list[ModuleType]:
    tracers = [stdlib_tracemalloc]
    memtape = sys.modules.get(MEMTAPE_MODULE)
    if memtape is not None and memtape is not stdlib_tracemalloc:
        tracers.append(memtape)
    return tracers


@pytest.fixture(autouse=True)
def _tracing_stopped_around_each_test(request: pytest.FixtureRequest) -> Iterator[None]:
    if not request.node.path.name.startswith("test_tm_"):
        yield  # other suites manage their own tracing
        return
    leaked = [m.__name__ for m in _loaded_tracers() if m.is_tracing()]
    for module in _loaded_tracers():
        module.stop()
    assert not leaked, f"tracing was left on before this test: {leaked}"
    yield
    for module in _loaded_tracers():
        module.stop()


@pytest.fixture(params=list(IMPLEMENTATIONS))
def tm_name(request: pytest.FixtureRequest) -> str:
    """Import name of the module under test (for child interpreters)."""
    key: str = request.param
    if key == "stdlib":
        assert stdlib_is_builtin(), "the stdlib reference is not the builtin tracer"
    else:
        import_memtape()
    return IMPLEMENTATIONS[key]


@pytest.fixture
def tm(tm_name: str) -> Iterator[ModuleType]:
    """The module under test, tracing stopped before and after."""
    module = importlib.import_module(tm_name)
    assert not module.is_tracing()
    yield module
    module.stop()


@pytest.fixture
def stdlib_tm() -> ModuleType:
    """The reference implementation (never started while ``tm`` traces)."""
    assert stdlib_is_builtin(), "the stdlib reference is not the builtin tracer"
    return stdlib_tracemalloc


@pytest.fixture(params=["memtape"])
def memtape_name(request: pytest.FixtureRequest) -> str:
    """Import name of memtape's drop-in, for memtape-only tests (ids ``[memtape]``)."""
    import_memtape()
    return MEMTAPE_MODULE


@pytest.fixture
def memtape_tm(memtape_name: str) -> Iterator[ModuleType]:
    """memtape's drop-in module, for memtape-only tests."""
    module = importlib.import_module(memtape_name)
    yield module
    module.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[HeadlessChromium]:
    """Headless Chromium for the HTML tests; they fail (never skip) when it cannot start."""
    try:
        chromium = HeadlessChromium()
    except ChromiumUnavailable as exc:
        pytest.fail(f"headless Chromium is required for the HTML tests: {exc}")
    try:
        yield chromium
    finally:
        chromium.close()


# `@pytest.mark.needs_builds("3.14", ...)`: a test that runs memtape on, or attaches it
# to, other CPython versions than the running one needs memtape built for each of them
# (`_native.cpython-3XY-*.so` in python/memtape). scripts/test.sh builds every version of
# the run before any pytest; a run narrowed by MEMTAPE_PYTHONS leaves the others out, and
# so are the tests that need them: deselected (counted in pytest's summary), not skipped,
# and named once at the end.
PACKAGE_DIR = Path(__file__).resolve().parent.parent / "python" / "memtape"


_LEFT_OUT = pytest.StashKey[list[str]]()


def memtape_built_for(version: str) -> bool:
    """Whether python/memtape holds a memtape build for CPython ``version`` ("3.14")."""
    tag = version.replace(".", "")
    return any(PACKAGE_DIR.glob(f"_native.cpython-{tag}-*.so"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "needs_builds(*versions): deselected unless memtape is built for each"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept, left = [], []
    for item in items:
        marker = item.get_closest_marker("needs_builds")
        missing = [v for v in (marker.args if marker else ()) if not memtape_built_for(v)]
        (left if missing else kept).append(item)
        if missing:
            config.stash.setdefault(_LEFT_OUT, []).append(f"{item.nodeid}: {', '.join(missing)}")
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    left = terminalreporter.config.stash.get(_LEFT_OUT, [])
    if left:
        terminalreporter.write_line(
            f"left out: {len(left)} test(s) need memtape built for another CPython "
            "(scripts/test.sh builds every version of its run first):"
        )
        for line in left:
            terminalreporter.write_line(f"  {line}")
