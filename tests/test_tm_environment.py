"""memtape only: `python -m memtape.tracemalloc script` and MEMTAPE_TRACEMALLOC=N."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from types import ModuleType

import pytest
from child_python import describe, run_python
from source_lines import line_of

# Reports, as JSON on stdout, what a script sees of its own run. `early` is allocated
# before anything imports memtape: only a tracer started before the script traces it.
REPORTER = """\
import os, sys
early = bytearray(1000)  # @tm:early
import json
import memtape.tracemalloc as tm
import sibling
tb = tm.get_object_traceback(early)
print(json.dumps({
    "argv": sys.argv,
    "name": __name__,
    "file": __file__,
    "tracing": tm.is_tracing(),
    "limit": tm.get_traceback_limit(),
    "early": None if tb is None else [tb[-1].filename, tb[-1].lineno],
    "sibling": sibling.VALUE,
}))
if os.environ.get("RAISE"):
    raise ValueError(os.environ["RAISE"])
sys.exit(int(os.environ.get("EXIT_CODE", "0")))
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    """The reporter script, with a sibling module it imports from its own directory."""
    directory = tmp_path / "app"
    directory.mkdir()
    (directory / "sibling.py").write_text("VALUE = 42\n", encoding="utf-8")
    path = directory / "report.py"
    path.write_text(REPORTER, encoding="utf-8")
    return path


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A working directory that is not the script's."""
    path = tmp_path / "cwd"
    path.mkdir()
    return path


def test_module_runner_traces_the_script_from_its_first_line(
    memtape_name: str, script: Path, elsewhere: Path
) -> None:
    result = run_python(["-m", memtape_name, str(script), "a", "--b"], cwd=elsewhere)
    assert result.returncode == 0, describe(result)
    seen = json.loads(result.stdout)
    assert seen["argv"] == [str(script), "a", "--b"]
    assert seen["name"] == "__main__"
    assert seen["file"] == str(script)
    assert seen["tracing"] is True
    assert seen["early"] == [str(script), line_of(script, "early")]
    assert seen["sibling"] == 42


def test_module_runner_keeps_the_exit_code(
    memtape_name: str, script: Path, elsewhere: Path
) -> None:
    result = run_python(["-m", memtape_name, str(script)], env={"EXIT_CODE": "7"}, cwd=elsewhere)
    assert result.returncode == 7, describe(result)
    assert json.loads(result.stdout)["tracing"] is True


def test_module_runner_keeps_uncaught_exceptions(
    memtape_name: str, script: Path, elsewhere: Path
) -> None:
    plain = run_python([str(script)], env={"RAISE": "boom"}, cwd=elsewhere)
    result = run_python(["-m", memtape_name, str(script)], env={"RAISE": "boom"}, cwd=elsewhere)
    assert result.returncode == plain.returncode == 1, describe(result)
    assert result.stderr.rstrip().splitlines()[-1] == "ValueError: boom"
    assert f'File "{script}", line ' in result.stderr


def test_module_runner_reports_a_missing_script(memtape_name: str, tmp_path: Path) -> None:
    missing = tmp_path / "no_such_script.py"
    result = run_python(["-m", memtape_name, str(missing)])
    assert result.returncode != 0, describe(result)
    assert str(missing) in result.stderr


def test_env_var_starts_tracing_before_the_script(
    memtape_name: str, script: Path, elsewhere: Path
) -> None:
    result = run_python([str(script), "x"], env={"MEMTAPE_TRACEMALLOC": "5"}, cwd=elsewhere)
    assert result.returncode == 0, describe(result)
    seen = json.loads(result.stdout)
    assert seen["tracing"] is True
    assert seen["limit"] == 5
    assert seen["argv"] == [str(script), "x"]
    assert seen["early"] == [str(script), line_of(script, "early")]


def test_without_the_env_var_nothing_is_traced(
    memtape_name: str, script: Path, elsewhere: Path
) -> None:
    result = run_python([str(script)], cwd=elsewhere)
    assert result.returncode == 0, describe(result)
    seen = json.loads(result.stdout)
    assert seen["tracing"] is False
    assert seen["early"] is None


def test_env_var_with_a_deep_limit(memtape_name: str, tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        textwrap.dedent(
            """
            import memtape.tracemalloc as tm
            print(tm.is_tracing(), tm.get_traceback_limit())
            """
        ),
        encoding="utf-8",
    )
    result = run_python([str(probe)], env={"MEMTAPE_TRACEMALLOC": "65535"})
    assert result.returncode == 0, describe(result)
    assert result.stdout.split() == ["True", "65535"]


def test_memtape_tracing_does_not_start_the_builtin_tracer(
    memtape_tm: ModuleType, stdlib_tm: ModuleType
) -> None:
    # memtape records allocations itself; it must not delegate to the builtin tracer.
    memtape_tm.start(3)
    assert memtape_tm.is_tracing()
    assert not stdlib_tm.is_tracing()
    memtape_tm.stop()
    stdlib_tm.start(2)
    try:
        assert not memtape_tm.is_tracing()
    finally:
        stdlib_tm.stop()
