"""memtape refuses to import on an interpreter it does not support, saying which it does."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent / "python"


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


def test_a_newer_version_is_refused() -> None:
    message = import_error(sys.executable, "sys.version_info = (3, 16, 0, 'final', 0)")
    assert message.startswith("memtape supports CPython 3.11, 3.12, 3.13, 3.14, 3.15; this is")


def test_free_threaded_builds_are_refused_by_their_abi_flag() -> None:
    # What a free-threaded build (python3.14t) reports, even with its GIL turned back on.
    message = import_error(sys.executable, "sys.abiflags = 't'")
    assert message.startswith("memtape does not support free-threaded CPython builds"), message
    assert "ABI flags 't'" in message and "CPython 3.11 to 3.15" in message


def test_free_threaded_builds_are_refused_with_the_gil_off() -> None:
    message = import_error(sys.executable, "sys._is_gil_enabled = lambda: False")
    assert message.startswith("memtape does not support free-threaded CPython builds"), message
