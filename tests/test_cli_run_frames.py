"""``memtape run``'s results show the program only: every stack starts at the program's
own first frame (where ``python``'s traceback starts), and nothing memtape, runpy or the
import system does to load the program is counted, for a script, ``-m module`` (with its
package's ``__init__``) and ``-c`` code. Real programs through the real command."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from child_python import describe
from memtape_cli import PACKAGE_DIR, memtape, ok, python, write_program

NOT_THE_PROGRAMS = (str(PACKAGE_DIR), "<frozen runpy>", "runpy.py", "<frozen importlib.")

SCRIPT = """
def build(n):
    return [bytearray(1000) for _ in range(n)]


kept = build(300)
text = {i: str(i) for i in range(2000)}
"""

# A script that raises at the end: python's traceback shows where a stack starts.
RAISING = SCRIPT + "raise ValueError('the end')\n"

PACKAGE_INIT = "ON_IMPORT = [bytearray(2000) for _ in range(5)]\n"
MODULE = "import json\nbig = bytearray(300_000)\nrows = [json.dumps(i) for i in range(500)]\n"


def folded_stacks(capture: Path, tmp_path: Path, *options: str) -> list[list[str]]:
    """Each stack of ``flamegraph --folded`` (at the peak, or ``--leaks``), outermost
    frame first, as ``function (file:line)``."""
    out = tmp_path / f"{capture.stem}{'-'.join(options)}.folded"
    ok(memtape("flamegraph", capture, "--folded", *options, "--force", "-o", out))
    stacks = []
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        assert count.isdigit(), line
        stacks.append(stack.split(";"))
    return stacks


def frame_file(frame: str) -> str:
    match = re.fullmatch(r".* \((.*):\d+\)", frame)
    assert match, frame
    return match.group(1)


def top_files(capture: Path) -> list[str]:
    """Every file named by ``top --by traceback --json`` at the peak and at the end."""
    files = []
    for at in ("peak", "end"):
        shown = ok(memtape("top", capture, "--json", "--by", "traceback", "--at", at)).stdout
        for site in json.loads(shown)["sites"]:
            files += [frame["filename"] for frame in site["frames"]]
    return files


def assert_program_only(capture: Path, tmp_path: Path, outermost: set[str]) -> None:
    """Every stack starts in one of the ``outermost`` files, and no frame is memtape's,
    runpy's or the import system's."""
    for options in ((), ("--leaks",)):
        stacks = folded_stacks(capture, tmp_path, *options)
        assert stacks, options
        for stack in stacks:
            assert frame_file(stack[0]) in outermost, stack
            assert stack[0].startswith("<module> ("), stack
            theirs = [f for f in stack if any(n in frame_file(f) for n in NOT_THE_PROGRAMS)]
            assert theirs == [], stack
    files = top_files(capture)
    assert files and not [f for f in files if any(n in f for n in NOT_THE_PROGRAMS)], files


def traceback_files(stderr: str) -> list[str]:
    return re.findall(r'^  File "([^"]+)", line \d+', stderr, re.M)


def test_script_stacks_start_where_pythons_traceback_does(tmp_path: Path) -> None:
    script = write_program(tmp_path / "raising.py", RAISING)
    capture = tmp_path / "raising.mtape"
    result = memtape("run", "-o", capture, script)
    plain = python(script)
    assert result.returncode == plain.returncode == 1, describe(result)
    # python's traceback starts at the script; memtape run's is the same.
    assert traceback_files(plain.stderr)[0] == str(script), plain.stderr
    assert traceback_files(result.stderr) == traceback_files(plain.stderr), result.stderr
    assert_program_only(capture, tmp_path, {str(script)})
    # The summary's sites are the script's.
    summary = result.stderr[result.stderr.index("top sites at the peak") :]
    rows = [line for line in summary.splitlines() if re.match(r"^\d+ ", line)]
    assert rows and all(f"{script}:" in row for row in rows), summary


def test_module_stacks_start_in_the_package_and_the_module(tmp_path: Path) -> None:
    package = tmp_path / "userpkg"
    package.mkdir()
    write_program(package / "__init__.py", PACKAGE_INIT)
    write_program(package / "job.py", MODULE)
    capture = tmp_path / "module.mtape"
    ok(memtape("run", "-q", "-o", capture, "-m", "userpkg.job", cwd=tmp_path))
    files = {str(package / "__init__.py"), str(package / "job.py")}
    assert_program_only(capture, tmp_path, files)
    # The package's __init__ is the program's (python -m runs it first): counted.
    stacks = folded_stacks(capture, tmp_path, "--leaks")
    assert any(frame_file(s[0]) == str(package / "__init__.py") for s in stacks), stacks


def test_code_stacks_start_in_the_code(tmp_path: Path) -> None:
    capture = tmp_path / "code.mtape"
    result = ok(memtape("run", "-o", capture, "-c", "kept = [bytearray(5000), bytearray(7000)]"))
    assert_program_only(capture, tmp_path, {"<string>"})
    assert "<string>:1 in <module>" in result.stderr, result.stderr


def test_code_that_allocates_nothing_records_nothing(tmp_path: Path) -> None:
    """``-c "x = 1"`` allocates nothing of its own: no site, a peak of 0 B."""
    capture = tmp_path / "nothing.mtape"
    result = ok(memtape("run", "-o", capture, "-c", "x = 1"))
    assert "memtape: peak 0 B" in result.stderr, result.stderr
    shown = json.loads(ok(memtape("top", capture, "--json")).stdout)
    assert shown["sites"] == [], shown


# A compiled package (as mypyc builds black and mypy): its __init__ is an extension
# module whose init function keeps a 3,000,000-byte bytes object.
COMPILED_INIT = r"""
#include <Python.h>

static struct PyModuleDef compiled_pkg = {PyModuleDef_HEAD_INIT, "cpkg", NULL, -1, NULL};

PyMODINIT_FUNC PyInit_cpkg(void) {
    PyObject *module = PyModule_Create(&compiled_pkg);
    PyObject *blob = PyBytes_FromStringAndSize(NULL, 3000000);
    if (module == NULL || blob == NULL || PyModule_AddObject(module, "BLOB", blob) < 0) {
        Py_XDECREF(blob);
        Py_XDECREF(module);
        return NULL;
    }
    return module;
}
"""


def build_compiled_package(root: Path) -> Path:
    """``root/cpkg``: an extension module as its ``__init__``, and a ``__main__.py``."""
    package = root / "cpkg"
    package.mkdir()
    source = root / "cpkg_init.c"
    source.write_text(COMPILED_INIT)
    config = python(
        "-c",
        "import sysconfig; print(sysconfig.get_paths()['include']);"
        "print(sysconfig.get_config_var('EXT_SUFFIX'))",
    )
    include, suffix = ok(config).stdout.split()
    gcc = ["gcc", "-shared", "-fPIC", "-O1", f"-I{include}", str(source)]
    built = subprocess.run(
        [*gcc, "-o", str(package / f"__init__{suffix}")], capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr
    write_program(package / "__main__.py", "import cpkg\nsize = len(cpkg.BLOB)\n")
    return package


def test_a_compiled_package_run_with_dash_m_is_counted(tmp_path: Path) -> None:
    """``python -m cpkg`` imports the compiled package first, as the program's: its init
    function's 3,000,000 bytes are the program's, recorded, with no frame of memtape's,
    as ``memtape run`` of a script importing it records them."""
    build_compiled_package(tmp_path)
    capture = tmp_path / "compiled.mtape"
    ok(memtape("run", "-q", "-o", capture, "-m", "cpkg", cwd=tmp_path))
    blob = sys.getsizeof(b"x" * 3_000_000)
    leaks = folded_stacks(capture, tmp_path, "--leaks")
    assert not [s for s in leaks if any(str(PACKAGE_DIR) in f for f in s)], leaks
    shown = json.loads(ok(memtape("stats", capture, "--json")).stdout)
    assert shown["end"]["bytes"] >= blob, shown["end"]
    script = write_program(tmp_path / "importer.py", "import cpkg\n")
    by_script = tmp_path / "script.mtape"
    ok(memtape("run", "-q", "-o", by_script, script, cwd=tmp_path))
    imported = json.loads(ok(memtape("stats", by_script, "--json")).stdout)
    # The same blocks either way, within the few the two launches differ by.
    assert abs(shown["end"]["bytes"] - imported["end"]["bytes"]) < 64 * 1024, (
        shown["end"],
        imported["end"],
    )
