"""Building the C libraries the native-allocation tests load with ctypes (gcc), and
reading a capture's native blocks.

``build(tmp)`` compiles ``tests/native/nativealloc.c`` into ``libnativealloc.so``
(``build_alloc(tmp)``: that one alone) and a RUNPATH pair (``libnaparent.so`` opening
``sub/libnachild.so`` by its bare name). ``build_library(name, tmp)`` compiles
``tests/native/NAME.c`` alone. ``build_call_chain(tmp, frame_pointers=...)``
compiles the ``outer -> middle -> leaf_alloc`` chain of ``tests/native/callchain.c``.
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

#: The start of a test program: loads the library given as ``sys.argv[1]`` as ``lib``
#: with typed functions, and ``libc_malloc`` is libc's own ``malloc``.
LOAD_LIBRARY = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
P = ctypes.c_void_p
S = ctypes.c_size_t
for name, args in {
    "na_malloc": [S], "na_calloc": [S, S], "na_realloc": [P, S],
    "na_reallocarray": [P, S, S], "na_free": [P], "na_memalign": [S, S],
    "na_aligned_alloc": [S, S], "na_valloc": [S], "na_posix_memalign": [S, S],
    "na_mmap": [S], "na_munmap": [P, S], "na_mremap": [P, S, S],
    "na_pthread_alloc": [S, ctypes.c_int], "na_pthread_free": [],
    "na_churn": [ctypes.c_int, S], "na_malloc_target": [],
}.items():
    fn = getattr(lib, name)
    fn.argtypes = args
    fn.restype = P if name not in ("na_munmap", "na_pthread_alloc", "na_churn") else ctypes.c_long
libc_malloc = ctypes.cast(ctypes.CDLL(None).malloc, P).value
"""


@dataclass(frozen=True)
class NativeLibs:
    """The built libraries."""

    alloc: Path
    parent: Path


def _gcc(*args: str | Path) -> None:
    gcc = shutil.which("gcc")
    assert gcc, "gcc is needed (scripts/test.sh installs it: apt-get install gcc)"
    subprocess.run([gcc, "-O1", "-fPIC", "-shared", *map(str, args)], check=True)


def build_call_chain(out: Path, *, frame_pointers: bool) -> Path:
    """Compiles ``tests/native/callchain.c`` (``outer -> middle -> leaf_alloc -> malloc``)
    with debug information, with or without frame pointers; returns its path."""
    name = "libchain-fp.so" if frame_pointers else "libchain-nofp.so"
    fp = "-fno-omit-frame-pointer" if frame_pointers else "-fomit-frame-pointer"
    lib = out / name
    _gcc("-g", fp, "-o", lib, SOURCES / "callchain.c")
    return lib


def call_chain_lines() -> dict[str, int]:
    """The line of each ``/* MARK name */`` in ``callchain.c``: where each function calls
    the next."""
    lines = (SOURCES / "callchain.c").read_text(encoding="utf-8").splitlines()
    return {
        line.split("MARK ")[1].split()[0]: n
        for n, line in enumerate(lines, start=1)
        if "/* MARK " in line
    }


def build_library(name: str, out: Path) -> Path:
    """Compiles ``tests/native/NAME.c`` into ``out/libNAME.so``; returns its path."""
    lib = out / f"lib{name}.so"
    _gcc("-o", lib, SOURCES / f"{name}.c")
    return lib


def build_alloc(out: Path) -> Path:
    """Compiles ``libnativealloc.so`` into ``out``; returns its path."""
    alloc = out / "libnativealloc.so"
    _gcc("-o", alloc, SOURCES / "nativealloc.c", "-lpthread")
    return alloc


def build(out: Path) -> NativeLibs:
    """Compiles the test libraries into ``out``."""
    alloc = build_alloc(out)
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
