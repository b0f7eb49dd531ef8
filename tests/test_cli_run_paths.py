"""``memtape run DIR`` and ``memtape run app.zip`` run them as python does (issue 34,
item 6): a directory or zip file (``python -m zipapp``) with a ``__main__.py`` runs that
module as ``__main__``, with python's ``sys.argv``, ``sys.path[0]``, module globals and
exit status; one without it fails with python's words and status. Each case runs the
same program under plain python and compares."""

from __future__ import annotations

import os
import zipapp
import zipfile
from pathlib import Path

import pytest
from child_python import describe
from memtape_cli import Site, memtape, python, read_json, write_program

MAIN = """
import sys
import helper
keep = bytearray(300_000)  # @main
print("argv", sys.argv)
print("path0", sys.path[0])
print("file", __file__, __name__, __package__ == "", __doc__)
print("spec", __spec__.name, __spec__.origin, type(__loader__).__name__)
print("cached", globals().get("__cached__", "(not set: 3.15+)"))
print("main", sys.modules["__main__"] is sys.modules[__name__], type(__builtins__).__name__)
print("helper", helper.__file__)
raise SystemExit(int(sys.argv[-1]))
"""
MAIN_LINE = 4  # in __main__.py, after its docstring


def make_app(tmp_path: Path) -> Path:
    app = tmp_path / "app"
    app.mkdir()
    write_program(app / "__main__.py", '"""the app"""\n' + MAIN.lstrip("\n"))
    write_program(app / "helper.py", "VALUE = 1\n")
    return app


def same_as_python(tmp_path: Path, target: str, *args: str) -> Path:
    """Runs ``target`` under memtape and python from ``tmp_path``; same output and status."""
    capture = tmp_path / "run.mtape"
    ran = memtape("run", "-q", "-o", capture, "--force", target, *args, cwd=tmp_path)
    plain = python(target, *args, cwd=tmp_path)
    assert (ran.returncode, ran.stdout) == (plain.returncode, plain.stdout), (
        describe(ran) + "\n--- python:\n" + describe(plain)
    )
    assert ran.stderr == plain.stderr == "", describe(ran)
    return capture


@pytest.mark.parametrize("written", ["app", "./app/", "{abs}"])
def test_a_directory_with_a_main(tmp_path: Path, written: str) -> None:
    app = make_app(tmp_path)
    target = written.format(abs=app)
    capture = same_as_python(tmp_path, target, "a b", "3")
    top = Site.of(read_json("top", capture, "--at", "end")["sites"][0])
    # Named as python names the module (its __file__): the path as written, not normalized.
    assert top.at(os.path.join(tmp_path, target, "__main__.py"), MAIN_LINE), top


@pytest.mark.parametrize("suffix", [".pyz", ".zip"])
def test_a_zip_app(tmp_path: Path, suffix: str) -> None:
    zipapp.create_archive(make_app(tmp_path), tmp_path / f"app{suffix}")
    capture = same_as_python(tmp_path, f"app{suffix}", "5")
    top = Site.of(read_json("top", capture, "--at", "end")["sites"][0])
    assert top.at(tmp_path / f"app{suffix}" / "__main__.py", MAIN_LINE), top


def test_an_exception_in_a_directorys_main(tmp_path: Path) -> None:
    """The program's own frames and the error, status 1. (python's traceback for a
    directory also shows two frames of its own launcher, <frozen runpy>; memtape shows
    the program's frames only, as python does for a script.)"""
    app = tmp_path / "raises"
    app.mkdir()
    write_program(app / "__main__.py", "def f():\n    raise ValueError('boom')\nf()\n")
    ran = memtape("run", "-q", "-o", tmp_path / "r.mtape", "raises", cwd=tmp_path)
    plain = python("raises", cwd=tmp_path)
    assert ran.returncode == plain.returncode == 1, describe(ran)

    def program_frames(stderr: str) -> list[str]:
        return [line for line in stderr.splitlines() if line.startswith('  File "/')]

    assert program_frames(ran.stderr) == program_frames(plain.stderr), describe(ran)
    assert len(program_frames(ran.stderr)) == 2
    assert ran.stderr.splitlines()[-1] == plain.stderr.splitlines()[-1] == "ValueError: boom"


@pytest.mark.parametrize("kind", ["directory", "zip"])
def test_no_main_is_pythons_error(tmp_path: Path, kind: str) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    write_program(empty / "helper.py", "VALUE = 1\n")
    target = "empty"
    if kind == "zip":
        with zipfile.ZipFile(tmp_path / "empty.pyz", "w") as archive:
            archive.write(empty / "helper.py", "helper.py")
        target = "empty.pyz"
    ran = memtape("run", "-q", "-o", tmp_path / "e.mtape", target, cwd=tmp_path)
    plain = python(target, cwd=tmp_path)
    assert plain.returncode == 1 and ran.returncode == plain.returncode, describe(ran)
    message = f"can't find '__main__' module in '{tmp_path / target}'\n"
    assert plain.stderr.endswith(f": {message}"), describe(plain)
    assert ran.stderr == f"memtape run: {message}", describe(ran)
    assert not (tmp_path / "e.mtape").exists()
