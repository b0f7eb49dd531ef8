"""The frame layout memtape reads is the interpreter's own: each offset it uses (read from
``_Py_DebugOffsets`` at import on 3.13 and later, written in for 3.11 and 3.12, and
``_co_firsttraceable`` found by probing code objects) equals ``offsetof`` in the structs
of this interpreter's headers, compiled here with gcc."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from memtape import _native
from source_lines import line_of

SOURCE = Path(__file__).parent / "native" / "frame_offsets.c"


def header_offsets(tmp_path: Path) -> dict[str, int]:
    gcc = shutil.which("gcc")
    assert gcc, "gcc is needed (scripts/test.sh installs it: apt-get install gcc)"
    include = sysconfig.get_path("include")
    assert (Path(include) / "internal").is_dir(), f"no internal headers in {include}"
    program = tmp_path / "frame_offsets"
    subprocess.run([gcc, f"-I{include}", "-o", str(program), str(SOURCE)], check=True)
    out = subprocess.run([str(program)], capture_output=True, text=True, check=True).stdout
    return {name: int(offset) for name, offset in (line.split() for line in out.splitlines())}


def test_every_offset_read_is_the_headers_offsetof(tmp_path: Path) -> None:
    expected = header_offsets(tmp_path)
    layout = _native._frame_layout()
    source = layout.pop("source")
    read = {name: offset for name, offset in layout.items() if offset is not None}
    assert read == expected
    assert source == ("_Py_DebugOffsets" if sys.version_info >= (3, 13) else "built in")


def test_a_traceback_is_the_stack_sys_getframe_shows() -> None:
    # Generators and closures: frames owned by generators, cells, and the entry frames
    # of a C call in between (list() calling the generator).
    from memtape import tracemalloc

    seen: list[list[tuple[str, int]]] = []

    def chain() -> list[tuple[str, int]]:
        frame = sys._getframe(1)
        out = []
        while frame is not None:
            out.append((frame.f_code.co_filename, frame.f_lineno))
            frame = frame.f_back
        return out

    def inner() -> bytearray:
        seen.append(chain())
        return bytearray(40_000)  # @tm:alloc

    def middle():  # type: ignore[no-untyped-def]
        yield inner()

    tracemalloc.start(100)
    try:
        kept = list(middle())
        frames = tracemalloc.get_object_traceback(kept[0])
    finally:
        tracemalloc.stop()
    assert frames is not None
    recorded = [(f.filename, f.lineno) for f in reversed(list(frames))]
    # The innermost frame is one line further on, at the allocation.
    shown = [(__file__, line_of(Path(__file__), "alloc")), *seen[0][1:]]
    assert recorded == shown[: len(recorded)]
    assert len(recorded) == min(100, len(shown))
