"""A limit marker with no argument or a bad one (issue 34, item 7): the test fails with
one line naming the test, the marker as written, what is wrong and what it takes; no
traceback of the plugin's source; the other tests run and are measured. pytest runs in a
child process, as a user runs it, also under pytest-xdist."""

from __future__ import annotations

import re
import subprocess
import textwrap
from pathlib import Path

import pytest
from child_python import describe
from memtape_cli import python

TESTS = """
import pytest

@pytest.mark.limit_memory()
def test_no_argument():
    pass

@pytest.mark.limit_memory("12 XB")
def test_unknown_unit():
    pass

@pytest.mark.limit_memory(-5)
def test_negative():
    pass

@pytest.mark.limit_memory(["1 KB"])
def test_a_list():
    pass

@pytest.mark.limit_memory(float("nan"))
def test_nan():
    pass

@pytest.mark.limit_memory("1 KB", "2 KB")
def test_two_sizes():
    pass

@pytest.mark.limit_leaks()
def test_leaks_no_argument():
    pass

@pytest.mark.limit_leaks("1 KB", repeats=3)
def test_leaks_misspelt_keyword():
    pass

@pytest.mark.limit_leaks("1 KB", warmups=-1)
def test_leaks_negative_warmups():
    pass

@pytest.mark.limit_leaks("1 KB", repeat="3")
def test_leaks_repeat_as_text():
    pass

@pytest.mark.limit_leaks("1 KB", filter_fn="mine")
def test_leaks_filter_not_callable():
    pass

@pytest.mark.limit_memory("1 MB")
def test_over():
    held = bytearray(2 * 2**20)

@pytest.mark.limit_memory("8 MB")
def test_within():
    held = bytearray(2 * 2**20)
"""

TAKES_SIZE = "limit_memory takes one size: bytes (1024) or a string like '24 MB'"
TAKES_LEAKS = (
    "limit_leaks takes one size (bytes, or a string like '1 MB') and optionally "
    "filter_fn=a callable, warmups=an int >= 0, repeat=an int >= 1"
)

EXPECTED = {
    "test_no_argument": f"@pytest.mark.limit_memory(): no size given; {TAKES_SIZE}",
    "test_unknown_unit": "@pytest.mark.limit_memory('12 XB'): not a size: '12 XB' "
    "(write e.g. '24 MB', '512 KiB' or 1024)",
    "test_negative": "@pytest.mark.limit_memory(-5): a size must be a finite number >= 0, not -5",
    "test_a_list": "@pytest.mark.limit_memory(['1 KB']): not a size: ['1 KB'] "
    "(write e.g. '24 MB', '512 KiB' or 1024)",
    "test_nan": "@pytest.mark.limit_memory(nan): a size must be a finite number >= 0, not nan",
    "test_two_sizes": f"@pytest.mark.limit_memory('1 KB', '2 KB'): 2 given; {TAKES_SIZE}",
    "test_leaks_no_argument": f"@pytest.mark.limit_leaks(): no size given; {TAKES_LEAKS}",
    "test_leaks_misspelt_keyword": "@pytest.mark.limit_leaks('1 KB', repeats=3): unknown "
    f"keyword argument 'repeats'; {TAKES_LEAKS}",
    "test_leaks_negative_warmups": "@pytest.mark.limit_leaks('1 KB', warmups=-1): warmups "
    "must be an int >= 0, not -1",
    "test_leaks_repeat_as_text": "@pytest.mark.limit_leaks('1 KB', repeat='3'): repeat must "
    "be an int >= 1, not '3'",
    "test_leaks_filter_not_callable": "@pytest.mark.limit_leaks('1 KB', filter_fn='mine'): "
    "filter_fn must be callable, not 'mine'",
}


def pytest_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_marked.py").write_text(textwrap.dedent(TESTS), encoding="utf-8")
    # Wide: the short summary keeps each failure's whole first line.
    # pytest-memray (installed beside memtape by scripts/venv.sh) would own the markers:
    # these are memtape's. MEMRAY_RESULT_PATH is what the suite's own pytest-memray sets.
    env = {
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTEST_ADDOPTS": "",
        "COLUMNS": "1000",
        "MEMRAY_RESULT_PATH": "",
    }
    return python(
        "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:memray", "-rf", "test_marked.py",
        *args, cwd=tmp_path, env=env,
    )  # fmt: skip


def failure_section(stdout: str, test: str) -> list[str]:
    """The lines of ``test``'s section under FAILURES (without xdist's worker line)."""
    match = re.search(rf"^_+ {test} _+\n(.*?)(?=^_+ \w+ _+$|^=+ )", stdout, re.M | re.S)
    assert match is not None, f"no failure section for {test}:\n{stdout}"
    lines = match.group(1).splitlines()
    return [line for line in lines if line.strip() and not re.match(r"\[gw\d+\] ", line)]


@pytest.mark.parametrize("xdist", [False, True], ids=["plain", "xdist"])
def test_bad_marker_arguments_fail_their_test_in_one_line(tmp_path: Path, xdist: bool) -> None:
    result = pytest_run(tmp_path, *(["-n", "2"] if xdist else []))
    assert result.returncode == 1, describe(result)
    assert "Traceback" not in result.stdout and "INTERNALERROR" not in result.stdout
    assert "pytest_plugin" not in result.stdout, describe(result)  # no plugin source shown
    summary = result.stdout[result.stdout.rindex("short test summary info") :]
    assert re.search(rf"{len(EXPECTED) + 1} failed, 1 passed", summary), summary
    for test, message in EXPECTED.items():
        assert failure_section(result.stdout, test) == [f"test_marked.py::{test}: {message}"]
        assert f"FAILED test_marked.py::{test} - Failed: test_marked.py::{test}: " in summary
    # The well-marked tests ran and were measured.
    over = failure_section(result.stdout, "test_over")
    assert over[0].startswith("Test was limited to 1.0 MiB but its peak was 2.0 MiB"), over


def test_bad_numbers_in_the_plugins_options(tmp_path: Path) -> None:
    """The plugin's counts are checked like the CLI's: pytest's usage error, status 4."""
    for option, message in (
        ("--memtape-stacks=0", "argument --memtape-stacks: must be at least 1, not 0"),
        ("--memtape-stacks=-3", "argument --memtape-stacks: must be at least 1, not -3"),
        (
            "--memtape-most-allocations=-2",
            "argument --memtape-most-allocations: must be at least 0, not -2",
        ),
    ):
        result = pytest_run(tmp_path, "--memtape", option)
        assert result.returncode == pytest.ExitCode.USAGE_ERROR, describe(result)
        assert f"error: {message}\n" in result.stderr, describe(result)
