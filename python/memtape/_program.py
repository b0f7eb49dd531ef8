"""Running a Python program the way ``python`` would: ``script.py`` (or a directory or
zip file with a ``__main__.py``), ``-m module`` or ``-c code``, with its own ``sys.argv``,
``__main__``, ``__file__``, ``sys.path[0]``, exit status and exceptions."""

from __future__ import annotations

import builtins
import functools
import linecache
import os
import pkgutil
import runpy
import sys
import types
from dataclasses import dataclass
from functools import cached_property
from importlib import _bootstrap_external
from importlib.machinery import ModuleSpec
from typing import Any, Literal

from memtape import _native

Kind = Literal["script", "module", "code"]


@dataclass(frozen=True)
class Program:
    """What to run and its arguments."""

    kind: Kind
    target: str
    args: tuple[str, ...]

    @cached_property
    def argv(self) -> list[str]:
        """``sys.argv`` as ``python`` sets it for this program (one list, made once)."""
        first = {"script": self.target, "module": self.target, "code": "-c"}[self.kind]
        return [first, *self.args]

    @property
    def name(self) -> str:
        """A short name for file names and titles."""
        if self.kind == "script":
            name = os.path.basename(os.path.normpath(self.target))
            return os.path.splitext(name)[0] or "script"
        if self.kind == "module":
            return self.target.rsplit(".", 1)[-1]
        return "code"

    @cached_property
    def path_entry(self) -> str | None:
        """For a script that is a directory or a zip file: what python puts first on
        ``sys.path`` and finds ``__main__`` in (the script's path joined to the current
        directory, as written); None for any other program."""
        if self.kind != "script":
            return None
        entry = os.path.join(os.getcwd(), self.target)
        # python asks sys.path_hooks, as pkgutil does: a directory or a zip file has one.
        return entry if pkgutil.get_importer(entry) is not None else None

    def missing_script(self) -> str | None:
        """python's message when a script cannot be opened, else None."""
        if self.kind != "script" or os.path.isfile(self.target) or self.path_entry:
            return None
        path = os.path.abspath(self.target)
        return f"can't open file {path!r}: [Errno 2] No such file or directory"

    def missing_main(self) -> str | None:
        """python's message (its exit status is 1) for a directory or zip file without a
        ``__main__`` module, else None."""
        if self.path_entry is None or _main_spec(self.path_entry) is not None:
            return None
        return f"can't find '__main__' module in {self.path_entry!r}"


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


def prepare(program: Program) -> None:
    """Sets ``sys.argv`` and ``sys.path[0]`` as ``python`` would for the program."""
    sys.argv = program.argv
    if program.kind == "module":
        sys.path[0] = os.getcwd()
    elif program.kind == "code":
        sys.path[0] = ""
    elif program.path_entry is not None:
        sys.path[0] = program.path_entry
    else:
        sys.path[0] = os.path.dirname(os.path.abspath(program.target))


def run(program: Program, keep: list[dict[str, Any]] | None = None) -> None:
    """Runs the program (after :func:`prepare`) in this interpreter as ``__main__``. Its
    exceptions (SystemExit included) propagate unchanged. When ``keep`` is given, the
    program's module globals are appended to it, so that what they hold stays alive (as
    it does in ``python`` until the interpreter exits) for as long as the caller keeps
    the list.

    The program's code runs through ``_native._exec_as_program``, which records from the
    program's first frame on: when the caller marks its own work unrecorded
    (``_native._own_work_begin``), what runpy and memtape do to load the program (read,
    compile, make ``__main__``) stays out of the recording, as it is not the program's."""
    if program.kind == "code":
        namespace = _run_code(program.target)
    elif program.path_entry is not None:
        _run_path_entry(program.path_entry, keep)
        return
    else:
        with _RunpyStart():
            if program.kind == "module":
                # run_module(mod_name, init_globals, run_name, alter_sys)
                namespace = runpy.run_module(program.target, None, "__main__", True)
            else:
                namespace = runpy.run_path(os.path.abspath(program.target), None, "__main__")
    if keep is not None:
        keep.append(namespace)


class _RunpyStart:
    """While runpy finds, imports and runs the program, the ``exec`` it calls (a module
    global shadows the builtin) is :func:`_native._exec_as_program`: the recording starts
    with the program's own frame, not in runpy. Until then the import system's ``exec``
    is too, so that the packages ``-m pkg.mod`` imports first (their ``__init__``, the
    user's code, as ``python -m`` runs it) are recorded, and the import machinery's work
    around them is not; likewise the import system's ``_imp``, whose creation and
    execution of an extension module (a compiled package such as mypyc's black or mypy)
    run as the program's. All are put back as the program starts (its own imports are
    ordinary) or, at the latest, when the run ends."""

    def __init__(self) -> None:
        self.shadowed: list[tuple[dict[str, Any], str, object]] = []

    def __enter__(self) -> None:
        self._shadow(vars(runpy), "exec", self._exec_program)
        machinery = vars(_bootstrap_external)
        self._shadow(machinery, "exec", _native._exec_as_program)
        self._shadow(machinery, "_imp", _ImpAsProgram(machinery["_imp"]))

    def __exit__(self, *exc_info: object) -> None:
        while self.shadowed:
            self._restore()

    def _shadow(self, namespace: dict[str, Any], name: str, value: object) -> None:
        self.shadowed.append((namespace, name, namespace.get(name, _NOTHING)))
        namespace[name] = value

    def _restore(self) -> None:
        namespace, name, saved = self.shadowed.pop()
        if saved is _NOTHING:
            namespace.pop(name, None)
        else:
            namespace[name] = saved

    def _exec_program(
        self, code: types.CodeType, globals: dict[str, Any], locals: object = None
    ) -> object:
        """runpy's ``exec`` of the program's code."""
        while len(self.shadowed) > 1:  # the import system's exec and _imp are its own again
            self._restore()
        return _native._exec_as_program(code, globals, locals)  # type: ignore[arg-type]


_NOTHING = object()


class _ImpAsProgram:
    """The import system's ``_imp`` while runpy imports the program's packages: an
    extension module's creation (its init function) and execution run as the program's,
    through :func:`_native._call_as_program`; everything else is ``_imp``'s own. The two
    are partials, not methods, so that no frame of memtape's stands in their stacks."""

    def __init__(self, imp: types.ModuleType) -> None:
        self._imp = imp
        self.create_dynamic = functools.partial(_native._call_as_program, imp.create_dynamic)
        self.exec_dynamic = functools.partial(_native._call_as_program, imp.exec_dynamic)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._imp, name)


def _run_code(code: str) -> dict[str, Any]:
    """``python -c``: the code runs as the ``__main__`` module (pickling its classes works)."""
    if sys.version_info >= (3, 13):
        # python -c shows the code's lines in tracebacks from 3.13 on.
        linecache.cache["<string>"] = (len(code), None, code.splitlines(True), "<string>")
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    # Running the user's -c code is the point, as `python -c` does.
    _exec_as_main(compile(code, "<string>", "exec"), main)
    return main.__dict__


def _exec_as_main(code: types.CodeType, main: types.ModuleType) -> None:
    """Runs ``code`` in ``main``'s globals, ``main`` being ``sys.modules["__main__"]``
    meanwhile, recorded from its first frame on (``_native._exec_as_program``)."""
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        _native._exec_as_program(code, main.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def _main_spec(entry: str) -> ModuleSpec | None:
    finder = pkgutil.get_importer(entry)
    return None if finder is None else finder.find_spec("__main__")


def _run_path_entry(entry: str, keep: list[dict[str, Any]] | None) -> None:
    """``python DIR`` or ``python app.zip``: the ``__main__`` module found in ``entry``
    runs as ``__main__``, with the globals python gives it (``sys.argv`` is left as
    :func:`prepare` set it). Its globals go into ``keep`` first: they outlive an
    exception or ``sys.exit`` too, as in python."""
    spec = _main_spec(entry)
    if spec is None or spec.loader is None:
        raise ImportError(f"can't find '__main__' module in {entry!r}")
    code = spec.loader.get_code("__main__")  # type: ignore[attr-defined]
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=spec.origin,
        __loader__=spec.loader,
        __package__="",
        __spec__=spec,
        __builtins__=builtins,
    )
    if sys.version_info < (3, 15):  # runpy stopped setting it in 3.15
        main.__dict__["__cached__"] = spec.cached
    if keep is not None:
        keep.append(main.__dict__)
    _exec_as_main(code, main)


def program_launcher_files() -> list[str]:
    """Files whose frames sit below a program run by :func:`run` in every stack: memtape's
    package (a directory, so a prefix) and runpy."""
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    return [package, os.path.abspath(runpy.__file__), "<frozen runpy>"]
