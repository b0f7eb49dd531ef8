"""A ``%%memtape`` cell's body compiled as IPython compiles a cell, and run as IPython
runs one: in the user's namespace, its last expression (if any) being the cell's result.

The body is cached under IPython's own name for a cell, with the cell's number, so
tracebacks and reports show ``Cell In[3], line 5`` and the line numbers of the cell as
the user sees it (line 1 is the ``%%memtape`` line)."""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from types import CodeType
from typing import Any

from IPython.core.error import UsageError

from memtape import _native


@dataclass(frozen=True)
class CellCode:
    """The compiled body: statements, then the last expression (None when the cell does
    not end with one)."""

    filename: str
    number: int
    label: str
    statements: CodeType
    last_expression: CodeType | None


def cell_label(shell: Any, filename: str) -> str | None:
    """``Cell In[3]`` for a file name IPython gave a cell, else None."""
    format_code_name = getattr(shell.compile, "format_code_name", None)  # IPython >= 8
    names = None if format_code_name is None else format_code_name(filename)
    return None if names is None else f"{names[0]} {names[1]}"


def cell_file_names(shell: Any) -> dict[str, str]:
    """Every cell file name IPython has given so far, with its label (``Cell In[3]``)."""
    shown: dict[str, str] = {}
    for filename in list(getattr(shell.compile, "_filename_map", {})):
        label = cell_label(shell, filename)
        if label is not None:
            shown[filename] = label
    return shown


def running_cell_number(shell: Any) -> int:
    """The number of the cell that called the magic: the nearest frame of a cell file
    (IPython 9 counts the next cell already while one runs, IPython 8 does not), else
    the shell's count."""
    numbers = getattr(shell.compile, "_filename_map", {})
    frame = sys._getframe(1)
    while frame is not None:
        number = numbers.get(frame.f_code.co_filename)
        if isinstance(number, int):
            return number
        frame = frame.f_back  # type: ignore[assignment]
    return int(shell.execution_count)


def compile_cell(shell: Any, body: str) -> CellCode:
    """Transforms (line magics, ``!`` commands), caches and compiles ``body``, the lines
    after the ``%%memtape`` line. A SyntaxError is raised as IPython raises it; top-level
    ``await`` is refused (the magic runs the cell synchronously, as ``%%time`` does)."""
    __tracebackhide__ = True  # IPython's tracebacks leave this frame out
    stripped = body.lstrip("\n")
    # IPython's transforms drop leading blank lines; put them back, with the magic's own
    # line, so that line numbers are the cell's.
    blank = len(body) - len(stripped)
    source = "\n" * (1 + blank) + shell.transform_cell(stripped)
    number = running_cell_number(shell)
    # Named apart from the cell itself and from a plain cell with the same text (ipykernel
    # names a cell by a hash of its text): their cached lines stay theirs.
    filename = shell.compile.cache(source, number, raw_code=f"# %%memtape body\n{body}")
    tree = shell.compile.ast_parse(source, filename=filename)
    tree = shell.transform_ast(tree)
    last: ast.Expression | None = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    if any(isinstance(node, ast.Await) for node in _top_level_nodes(tree)):
        raise UsageError(
            "%%memtape cannot run a cell with top-level await; "
            "put the awaits in an async function and await it outside the %%memtape cell"
        )
    return CellCode(
        filename=filename,
        number=number,
        label=cell_label(shell, filename) or f"Cell In[{number}]",
        statements=shell.compile(tree, filename, "exec"),
        last_expression=None if last is None else shell.compile(last, filename, "eval"),
    )


def _top_level_nodes(tree: ast.AST) -> list[ast.AST]:
    """The nodes of ``tree`` outside any function or class body."""
    found: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        found.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))
    return found


def run_cell_code(code: CellCode, shell: Any) -> object:
    """Runs the body in the user's namespace; its last expression's value, else None.
    Exceptions propagate unchanged. The body's code is what a recording records (from its
    own first frame on, see ``_native._exec_as_program``): not this function's work, nor
    the kernel's."""
    __tracebackhide__ = True  # IPython's tracebacks leave this frame out
    run = _native._exec_as_program
    run(code.statements, shell.user_global_ns, shell.user_ns)
    if code.last_expression is None:
        return None
    return run(code.last_expression, shell.user_global_ns, shell.user_ns)
