"""Builds tests/c_abi/fakecache.c into an importable extension for the running Python."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
INCLUDE = HERE.parent.parent / "include"


def build_fakecache(out_dir: Path) -> Path:
    """Compiles the extension; returns the .so path. Fails loudly without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("no C compiler (cc/gcc) on PATH: install gcc to run the C ABI tests")
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    target = out_dir / f"fakecache{suffix}"
    cmd = [
        cc,
        "-O1",
        "-Wall",
        "-Werror",
        "-shared",
        "-fPIC",
        "-pthread",
        f"-I{INCLUDE}",
        f"-I{sysconfig.get_paths()['include']}",
        str(HERE / "fakecache.c"),
        "-o",
        str(target),
    ]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return target


def load(path: Path) -> ModuleType:
    """Imports the built extension as ``fakecache``."""
    spec = importlib.util.spec_from_file_location("fakecache", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fakecache"] = module
    spec.loader.exec_module(module)
    return module
