"""A bad number or moment is a usage error, never a traceback nor a silent clamp (issue
34, item 7): the command's usage, one line naming the option and what it takes, status
2. A moment past the end of the recording says the recording's span."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from child_python import describe
from memtape_cli import memtape, ok, read_json, record, write_program

PROGRAM = """
import time
first = bytearray(100_000)
time.sleep(0.3)
second = bytearray(200_000)
"""


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("bad_numbers")
    script = write_program(where / "sleeps.py", PROGRAM)
    path = where / "sleeps.mtape"
    record(script, path)
    return path


def usage_error(command: str, option: str, *args: str) -> str:
    """Runs ``memtape COMMAND ARGS``; checks the usage error and returns its message."""
    result = memtape(command, *args)
    assert result.returncode == 2, describe(result)
    assert result.stdout == "", describe(result)
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"usage: memtape {command} "), describe(result)
    prefix = f"memtape {command}: error: argument {option}: "
    assert lines[-1].startswith(prefix), describe(result)
    assert all(line.startswith(" ") for line in lines[1:-1]), describe(result)  # usage only
    return lines[-1][len(prefix) :]


@pytest.mark.parametrize(
    ("command", "option", "args"),
    [
        ("top", "--limit", ["--limit", "-1"]),
        ("stats", "--limit", ["--limit", "-5"]),
        ("diff", "--limit", ["{cap}", "--limit", "-1"]),
        ("report", "--top", ["-o", "{out}", "--top", "-1"]),
        ("export", "--max-entries", ["--format", "torch", "-o", "{out}", "--max-entries", "-2"]),
    ],
)
def test_a_negative_count(
    capture: Path, tmp_path: Path, command: str, option: str, args: list[str]
) -> None:
    out = tmp_path / "out"
    argv = [a.format(cap=capture, out=out) for a in args]
    message = usage_error(command, option, str(capture), *argv)
    assert re.fullmatch(r"must be at least 0, not -\d", message), message
    assert not out.exists()
    fraction = usage_error(command, option, str(capture), *argv[:-1], "1.5")
    assert fraction == "not a whole number: '1.5'"


def test_a_count_above_any_real_one_means_all(capture: Path) -> None:
    """A limit as large as one likes shows every site (no overflow)."""
    every = read_json("top", capture, "--limit", "99999999999999999999999")
    assert every == read_json("top", capture, "--limit", "100000")


def test_run_numbers(tmp_path: Path) -> None:
    for option, value, message in (
        ("--nframe", "0", "must be at least 1, not 0"),
        ("--nframe", "65536", "must be at most 65535, not 65536"),
        ("--min-size", "-1", "must be at least 0, not -1"),
        ("--min-size", "1k", "not a whole number: '1k'"),
    ):
        full = "-n/--nframe" if option == "--nframe" else option
        result = memtape("run", option, value, "-c", "pass", cwd=tmp_path)
        assert result.returncode == 2, describe(result)
        assert result.stderr.splitlines()[-1] == f"memtape run: error: argument {full}: {message}"
    assert list(tmp_path.iterdir()) == []


def span(capture: Path) -> str:
    duration_ns = json.loads(ok(memtape("stats", capture, "--json")).stdout)["duration_ns"]
    return f"spans 0 to {duration_ns / 1e9:.3f}s"


def test_a_moment_past_the_end_names_the_span(capture: Path) -> None:
    stats = read_json("stats", capture)
    assert 0.2e9 < stats["duration_ns"] < 20e9  # it slept 0.3 s (the clock ticks coarsely)
    for args, option in (
        (["--from", "99s", "--to", "end"], "--from"),
        (["--from", "0.1s", "--to", "99s"], "--to"),
        (["--from", "start", "--to", "99000ms"], "--to"),
    ):
        message = usage_error("diff", option, str(capture), *args)
        expected = f"{args[args.index(option) + 1]} is past the end of the recording: "
        assert message == f"{expected}{capture} {span(capture)}", message
    # With two files, each moment is checked against its own file.
    message = usage_error("diff", "--to", str(capture), str(capture), "--to", "99s")
    assert message.endswith(span(capture)), message
    # Within the recording: answered.
    ok(memtape("diff", capture, "--from", "0.1s", "--to", "0.2s"))
    assert "bad moment '-1s'" in usage_error("diff", "--from", str(capture), "--from=-1s")
