"""Building the C libraries the native-allocation tests load with ctypes (gcc), and
reading a capture's native blocks.

``build(tmp)`` compiles ``tests/native/nativealloc.c`` into ``libnativealloc.so`` and a
RUNPATH pair (``libnaparent.so`` opening ``sub/libnachild.so`` by its bare name).
``native_blocks(capture)`` lists the native blocks live at the end of a capture as
``(size, innermost (file, line))``.
"""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from memtape import _native

SOURCES = Path(__file__).parent / "native"


@dataclass(frozen=True)
class NativeLibs:
    """The built libraries."""

    alloc: Path
    parent: Path


def _gcc(*args: str | Path) -> None:
    gcc = shutil.which("gcc")
    assert gcc, "gcc is needed (scripts/test.sh installs it: apt-get install gcc)"
    subprocess.run([gcc, "-O1", "-fPIC", "-shared", *map(str, args)], check=True)


def build(out: Path) -> NativeLibs:
    """Compiles the test libraries into ``out``."""
    alloc = out / "libnativealloc.so"
    _gcc("-o", alloc, SOURCES / "nativealloc.c", "-lpthread")
    (out / "sub").mkdir(exist_ok=True)
    _gcc("-o", out / "sub" / "libnachild.so", SOURCES / "nativealloc.c", "-lpthread")
    parent = out / "libnaparent.so"
    _gcc("-o", parent, SOURCES / "dlopen_parent.c", "-Wl,--enable-new-dtags,-rpath,$ORIGIN/sub")
    return NativeLibs(alloc, parent)


def native_blocks(capture: Path) -> Counter[tuple[int, tuple[str, int]]]:
    """``(size, innermost frame)`` -> count, for native blocks live at the capture's end."""
    traces = _native.analyze_capture(str(capture)).live_traces()
    return Counter(
        (size, tuple(frames[0]))
        for domain, size, frames, _total in traces
        if domain == _native.NATIVE_DOMAIN
    )


def domain_sizes(capture: Path, domain: int) -> Counter[int]:
    """Sizes of the blocks of ``domain`` live at the capture's end."""
    traces = _native.analyze_capture(str(capture)).live_traces()
    return Counter(size for d, size, _frames, _total in traces if d == domain)
