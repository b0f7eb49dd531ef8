"""Every command's --help is complete and plain (issue 34, item 5).

The commands are read from ``memtape --help`` itself, so a new command is checked as
soon as it is listed. For each, ``memtape COMMAND --help`` must list every option and
argument with a description of its own on one line (printed 400 columns wide, so that
a description is one line unless it holds a line break), say the default of every option
that takes a value (``memtape run``'s program forms, -m and -c, are not memtape's
options), offer ``--version``, and hold no reStructuredText markup.
"""

from __future__ import annotations

import importlib.metadata
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from child_python import describe
from memtape_cli import memtape, ok, python, write_program

WIDE = {"COLUMNS": "400"}
VERSION = f"memtape {importlib.metadata.version('memtape')}\n"

# reStructuredText that plain help must not show: ``literal``, :role:`x`, `link`_,
# **strong**, a directive, a literal block's "::" at a line's end.
RST = re.compile(r"``|:[a-z]+:`|`_|\*\*|^\s*\.\. |::$|`", re.MULTILINE)


@dataclass(frozen=True)
class Entry:
    """One option or argument of a help page: how it is written and its description."""

    section: str
    invocation: str
    description: str

    @property
    def flags(self) -> list[str]:
        """``["-o", "--output"]`` for ``-o FILE, --output FILE`` (``-o, --output FILE`` from
        Python 3.13 on), ``["file"]`` for an argument."""
        return [part.split()[0] for part in self.invocation.split(", ")]

    @property
    def takes_value(self) -> bool:
        """An option followed by a metavar or choices (``-o FILE``, ``--by {a,b}``)."""
        first = self.invocation.split(", ")[-1]
        return first.startswith("-") and " " in first


def help_of(*command: str) -> str:
    result = ok(memtape(*command, "--help", env=_wide_env()))
    assert result.stderr == "", describe(result)
    return result.stdout


def _wide_env() -> dict[str, str]:
    import os

    return {**os.environ, **WIDE}


def entries(page: str) -> list[Entry]:
    """The options and arguments of an argparse help page, section by section. An entry
    is a line indented two spaces; its description follows on the same line, or on the
    next one, indented further, when the invocation is long; a third line would be a
    description wrapped (or broken) over two lines."""
    found: list[Entry] = []
    section = ""
    lines = page.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line and not line.startswith(" ") and line.endswith(":"):
            # A section's title, when an entry follows (not a description's own colon).
            following = lines[i] if i < len(lines) else ""
            section = line[:-1] if re.match(r"^  \S", following) else ""
            continue
        if not section or not re.match(r"^  \S", line) or section == "usage":
            continue
        invocation, _, description = line.strip().partition("  ")
        if not description.strip() and i < len(lines) and re.match(r"^ {3,}\S", lines[i]):
            description = lines[i]
            i += 1
        assert not (i < len(lines) and re.match(r"^ {3,}\S", lines[i])), (
            f"the description of {invocation!r} takes more than one line:\n{page}"
        )
        found.append(Entry(section, invocation.strip(), description.strip()))
    return found


def commands() -> list[str]:
    """The commands ``memtape --help`` lists, with their descriptions."""
    page = help_of()
    listing = page.partition("\ncommands:\n")[2].partition("\n\n")[0]
    listed = re.findall(r"^ +(\w+) {2,}(\S.*)$", listing, re.MULTILINE)
    assert listed, page
    return [name for name, _ in listed]


COMMANDS = commands()


def test_the_top_level_help_lists_the_commands_with_csv_among_exports() -> None:
    page = help_of()
    assert not RST.search(page), page
    assert {"run", "stats", "top", "diff", "flamegraph", "report", "export"} <= set(COMMANDS)
    export = re.search(r"^ +export {2,}(.*)$", page, re.MULTILINE)
    assert export is not None
    for format_name in ("memory_viz", "tracemalloc", "JSON", "CSV"):
        assert format_name in export.group(1), export.group(1)
    assert ok(memtape("--version")).stdout == VERSION
    assert ok(memtape("-V")).stdout == VERSION


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_has_a_one_line_description(command: str) -> None:
    page = help_of(command)
    assert page.startswith(f"usage: memtape {command} "), page
    assert not RST.search(page), f"markup {RST.search(page)!r} in:\n{page}"
    found = entries(page)
    flags = [e.flags for e in found]
    assert ["-h", "--help"] in flags and ["-V", "--version"] in flags, page
    for entry in found:
        assert len(entry.description) >= 10, f"{entry.invocation!r} has no description:\n{page}"
        if entry.section == "options" and entry.takes_value:
            assert "default" in entry.description or "(required)" in entry.description, (
                f"{entry.invocation!r} does not say its default:\n{page}"
            )
    result = ok(memtape(command, "--version"))
    assert result.stdout == VERSION, describe(result)


def test_run_documents_its_options_and_defaults() -> None:
    page = help_of("run")
    described = {flag: e.description for e in entries(page) for flag in e.flags}
    for option in (
        "--output",
        "--nframe",
        "--min-size",
        "--native",
        "--no-native-heap",
        "--follow-children",
        "--force",
        "--quiet",
        "-q",
        "-m",
        "-c",
        "script.py",
    ):
        assert option in described, f"{option!r} missing from:\n{page}"
    assert "memtape-NAME-PID.mtape" in described["--output"]
    assert "(default: 64)" in described["--nframe"]
    assert "(default: 0, all)" in described["--min-size"]


def test_options_after_the_script_are_the_scripts(tmp_path: Path) -> None:
    """Only the options before the program are memtape's: ``--help`` and ``--version``
    after it reach the script, as with python."""
    script = write_program(tmp_path / "echo.py", "import sys\nprint(sys.argv[1:])\n")
    for args in (["--help"], ["--version", "-o", "x"], ["-q", "--", "-c"]):
        result = memtape("run", "-q", "-o", tmp_path / "echo.mtape", "--force", script, *args)
        assert result.returncode == 0, describe(result)
        assert result.stdout == python(script, *args).stdout == f"{args}\n"
