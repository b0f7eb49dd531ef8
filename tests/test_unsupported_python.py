"""memtape refuses an interpreter it does not support, saying which it does: at import, and
when built from source against one.

Real interpreters where this machine has them: pyenv's CPython 3.10 (too old), both to
import memtape and to build it. What cannot be had here is faked in the test's own
interpreter: a CPython newer than 3.15 (none is released) and a free-threaded build
(Debian unstable ships none of 3.14t/3.15t, and python.org's builds cannot be fetched
from these machines), by setting what the import check reads.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE_ROOT = REPO / "python"


def pyenv_python(version: str) -> str | None:
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found = sorted(glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", "python")))
    return found[-1] if found else None


def import_error(python: str, prelude: str = "") -> str:
    code = (
        f"import sys; sys.path.insert(0, {str(PACKAGE_ROOT)!r}); {prelude}\n"
        "try:\n    import memtape\nexcept ImportError as e:\n    print(e)\n"
        "else:\n    print('imported')\n"
    )
    out = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_cpython_310_is_refused_with_the_supported_versions() -> None:
    python = pyenv_python("3.10")
    assert python is not None, "pyenv's CPython 3.10 is needed for this test (pyenv install 3.10)"
    message = import_error(python)
    assert "memtape supports CPython 3.11, 3.12, 3.13, 3.14, 3.15" in message
    assert "3.10" in message


def test_a_build_against_cpython_310_stops_with_the_supported_versions() -> None:
    # A source build for 3.10 (maturin -i python3.10, or pip with --ignore-requires-python)
    # stops at compile time with one clear error, not with 3.11's frame layouts.
    python = pyenv_python("3.10")
    assert python is not None, "pyenv's CPython 3.10 is needed for this test (pyenv install 3.10)"
    cargo = shutil.which("cargo")
    assert cargo is not None, "cargo is needed for this test"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYO3_")}
    env.update(PYO3_PYTHON=python, CARGO_TARGET_DIR=str(REPO / "target" / "unsupported-check"))
    out = subprocess.run(
        [cargo, "check", "-p", "memtape-python", "--message-format=short"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode != 0, out.stderr
    errors = [line for line in out.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1, out.stderr
    assert errors[0].endswith("error: memtape supports CPython 3.11 to 3.15 on 64-bit platforms")
    assert "could not compile `memtape-python` (lib) due to 1 previous error" in out.stderr


def test_a_newer_version_is_refused() -> None:
    # Faked: no CPython newer than 3.15 exists yet.
    message = import_error(sys.executable, "sys.version_info = (3, 16, 0, 'final', 0)")
    assert message.startswith("memtape supports CPython 3.11, 3.12, 3.13, 3.14, 3.15; this is")


def test_free_threaded_builds_are_refused_by_their_abi_flag() -> None:
    # Faked: no free-threaded build can be installed here (see the module's text).
    # What a free-threaded build (python3.14t) reports, even with its GIL turned back on.
    message = import_error(sys.executable, "sys.abiflags = 't'")
    assert message.startswith("memtape does not support free-threaded CPython builds"), message
    assert "ABI flags 't'" in message and "CPython 3.11 to 3.15" in message


def test_free_threaded_builds_are_refused_with_the_gil_off() -> None:
    message = import_error(sys.executable, "sys._is_gil_enabled = lambda: False")
    assert message.startswith("memtape does not support free-threaded CPython builds"), message
