"""Running a Python program the way ``python`` would: ``script.py``, ``-m module`` or
``-c code``, with its own ``sys.argv``, ``__main__``, exit status and exceptions."""

from __future__ import annotations

import os
import runpy
import sys
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["script", "module", "code"]


@dataclass(frozen=True)
class Program:
    """What to run and its arguments."""

    kind: Kind
    target: str
    args: tuple[str, ...]

    @property
    def argv(self) -> list[str]:
        """``sys.argv`` as ``python`` sets it for this program."""
        first = {"script": self.target, "module": self.target, "code": "-c"}[self.kind]
        return [first, *self.args]

    @property
    def name(self) -> str:
        """A short name for file names and titles."""
        if self.kind == "script":
            return os.path.splitext(os.path.basename(self.target))[0] or "script"
        if self.kind == "module":
            return self.target.rsplit(".", 1)[-1]
        return "code"


def split_program(argv: list[str], i: int) -> Program | None:
    """The program starting at ``argv[i]`` (``-m MOD``, ``-c CODE`` or a script), or None
    when ``argv[i]`` is not one (the caller reports the usage error)."""
    arg = argv[i]
    if arg in ("-m", "-c"):
        if i + 1 >= len(argv):
            return None
        kind: Kind = "module" if arg == "-m" else "code"
        return Program(kind, argv[i + 1], tuple(argv[i + 2 :]))
    if arg.startswith("-") and arg != "-":
        return None
    return Program("script", arg, tuple(argv[i + 1 :]))


def run(program: Program, keep: list[dict[str, Any]] | None = None) -> None:
    """Runs the program in this interpreter. Its exceptions (SystemExit included)
    propagate to the caller unchanged. When ``keep`` is given, the program's module
    globals are appended to it, so that what they hold stays alive (as it does in
    ``python`` until the interpreter exits) for as long as the caller keeps the list."""
    sys.argv = program.argv
    namespace: dict[str, Any] = {"__name__": "__main__"}
    if keep is not None:
        keep.append(namespace)
    if program.kind == "module":
        namespace.update(runpy.run_module(program.target, run_name="__main__", alter_sys=True))
    elif program.kind == "code":
        sys.path[0] = ""
        # Running the user's -c code is the point, as `python -c` does.
        exec(compile(program.target, "<string>", "exec"), namespace)  # noqa: S102
    else:
        sys.path[0] = os.path.dirname(os.path.abspath(program.target))
        namespace.update(runpy.run_path(program.target, run_name="__main__"))
