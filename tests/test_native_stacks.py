"""Native stacks (``memtape run --native``): each allocation's C functions between the
Python line that called into C and the allocation, unwound in the hook and symbolized at
report time (function, file:line), with module+offset and a note when the library file
is gone; threads and fork keep working."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from memtape_cli import memtape, ok, python, read_json, record, write_program
from native_lib import build_call_chain, build_library, call_chain_lines
from source_lines import line_of

BLOCK = 3_000_000

PROGRAM = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.outer.restype = ctypes.c_void_p
lib.outer.argtypes = [ctypes.c_size_t]
kept = lib.outer(3_000_000)  # the Python line
text = [str(i) * 10 for i in range(10_000)]
"""
PYTHON_LINE = 5
TEXT_LINE = 6

THREADS_AND_FORK = """
import ctypes, os, sys, threading
lib = ctypes.CDLL(sys.argv[1])
lib.outer.restype = ctypes.c_void_p
lib.outer.argtypes = [ctypes.c_size_t]
lib.chain_free.argtypes = [ctypes.c_void_p]

def work():
    for _ in range(200):
        lib.chain_free(lib.outer(4096))

threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads:
    t.start()
pid = os.fork()
if pid == 0:
    work()
    os._exit(7)
for t in threads:
    t.join()
_, status = os.waitpid(pid, 0)
assert os.WEXITSTATUS(status) == 7, status
kept = lib.outer(3_000_000)  # after the threads and the fork
"""
THREADS_AND_FORK_LINE = 22


def traceback_of_block(capture: Path) -> list[dict[str, Any]]:
    """The frames (innermost first) of the site holding the 3 MB block at the peak."""
    rows = read_json("top", capture, "--by", "traceback", "--limit", "50")["sites"]
    matching = [row for row in rows if row["bytes"] >= BLOCK and row["count"] == 1]
    assert matching, rows
    frames: list[dict[str, Any]] = matching[0]["frames"]
    return frames


def function_index(frames: list[dict[str, Any]], function: str) -> int:
    names = [f["function"] for f in frames]
    assert function in names, names
    return names.index(function)


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, Path]:
    out = tmp_path_factory.mktemp("native-stacks")
    return {fp: build_call_chain(out, frame_pointers=fp) for fp in (True, False)}


@pytest.mark.parametrize("frame_pointers", [True, False], ids=["frame-pointers", "dwarf-only"])
def test_the_c_call_chain_follows_the_python_line(
    libs: dict[bool, Path], tmp_path: Path, frame_pointers: bool
) -> None:
    script = write_program(tmp_path / "chain.py", PROGRAM)
    capture = tmp_path / "chain.mtape"
    record(script, capture, str(libs[frame_pointers]), options=("--native",))
    frames = traceback_of_block(capture)
    lines = call_chain_lines()
    leaf, middle, outer = (function_index(frames, f) for f in ("leaf_alloc", "middle", "outer"))
    # Innermost first: the allocating function, its callers, then the Python line.
    assert leaf == 0, frames
    assert leaf < middle < outer, frames
    for name, index in (("leaf_alloc", leaf), ("middle", middle), ("outer", outer)):
        assert frames[index]["filename"].endswith("callchain.c"), frames[index]
        assert frames[index]["line"] == lines[name], (name, frames[index])
    python = [i for i, f in enumerate(frames) if f["filename"] == str(script)]
    assert python, frames
    assert frames[python[0]]["line"] == PYTHON_LINE
    assert python[0] > outer, frames
    # The interpreter's eval loop is not among the frames.
    assert not any("_PyEval_EvalFrameDefault" in f["function"] for f in frames), frames
    # The interpreter's own allocating functions (PyUnicode_New, ...) are not either: the
    # strings belong to their Python line.
    rows = read_json("top", capture, "--limit", "50")["sites"]
    text = [r for r in rows if r["frames"][0]["filename"] == str(script)]
    assert any(r["frames"][0]["line"] == TEXT_LINE and r["bytes"] > 300_000 for r in text), rows
    assert not any("PyUnicode_New" in r["frames"][0]["function"] for r in rows), rows


def test_flamegraph_and_top_show_the_c_functions(libs: dict[bool, Path], tmp_path: Path) -> None:
    script = write_program(tmp_path / "chain.py", PROGRAM)
    capture = tmp_path / "chain.mtape"
    record(script, capture, str(libs[False]), options=("--native",))
    ok(memtape("flamegraph", capture, "--folded", "-o", tmp_path / "folded.txt"))
    folded = (tmp_path / "folded.txt").read_text(encoding="utf-8")
    chains = [line for line in folded.splitlines() if "leaf_alloc" in line]
    assert len(chains) == 1, folded
    # Outermost first: the Python line, then outer, middle and leaf_alloc last.
    path = chains[0].rpartition(" ")[0].split(";")
    at = {
        name: next(i for i, f in enumerate(path) if f.startswith(name + " "))
        for name in ("<module>", "outer", "middle", "leaf_alloc")
    }
    assert at["<module>"] < at["outer"] < at["middle"] < at["leaf_alloc"] == len(path) - 1, path
    assert f"chain.py:{PYTHON_LINE})" in path[at["<module>"]], path
    assert "callchain.c:" in path[at["leaf_alloc"]], path
    top = ok(memtape("top", capture)).stdout
    assert "leaf_alloc" in top and "callchain.c" in top, top
    html = tmp_path / "flame.html"
    ok(memtape("flamegraph", capture, "-o", html))
    assert "leaf_alloc" in html.read_text(encoding="utf-8")


def test_a_library_moved_away_reads_as_module_and_offset(
    libs: dict[bool, Path], tmp_path: Path
) -> None:
    lib = tmp_path / "libmoving.so"
    shutil.copy(libs[False], lib)
    script = write_program(tmp_path / "chain.py", PROGRAM)
    capture = tmp_path / "chain.mtape"
    record(script, capture, str(lib), options=("--native",))
    lib.rename(tmp_path / "elsewhere.so")
    result = ok(memtape("top", capture, "--by", "traceback", "--json"))
    assert f"native frames in {lib} are shown as module+offset" in result.stderr, result.stderr
    assert "missing" in result.stderr
    frames = traceback_of_block(capture)
    assert frames[0]["function"].startswith("libmoving.so+0x"), frames[0]
    assert frames[0]["filename"] == str(lib)
    assert not any(f["function"] == "leaf_alloc" for f in frames)


def test_threads_and_fork_keep_working(libs: dict[bool, Path], tmp_path: Path) -> None:
    script = write_program(tmp_path / "busy.py", THREADS_AND_FORK)
    capture = tmp_path / "busy.mtape"
    record(script, capture, str(libs[False]), options=("--native",))
    frames = traceback_of_block(capture)
    assert frames[0]["function"] == "leaf_alloc", frames
    python = [f for f in frames if f["filename"] == str(script)]
    assert python and python[0]["line"] == THREADS_AND_FORK_LINE, frames


GETATTR_PROGRAM = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
assert lib.ga_run() > 0
"""


def test_a_thread_first_unwound_inside_pthread_getattr_np_runs_on(tmp_path: Path) -> None:
    # Its first allocation is pthread_getattr_np's own, made holding the thread's lock:
    # the unwinder's stack bounds must not come from pthread_getattr_np (a hang before).
    lib = build_library("getattr_thread", tmp_path)
    script = write_program(tmp_path / "getattr.py", GETATTR_PROGRAM)
    capture = tmp_path / "getattr.mtape"
    record(script, capture, str(lib), options=("--native",))
    rows = read_json("top", capture, "--by", "traceback", "--limit", "50")["sites"]
    (block,) = [row for row in rows if row["bytes"] == 1_234_567]
    assert block["frames"][0]["function"] == "thread_main", block


EVENTS_PROGRAM = """
import ctypes, json, sys
import memtape
lib = ctypes.CDLL(sys.argv[1])
lib.outer.restype = ctypes.c_void_p
lib.outer.argtypes = [ctypes.c_size_t]
memtape.record_memory_events(sources=("python", "native"), native_stacks=True)
kept = lib.outer(3_000_000)  # the Python line
events = memtape.get_memory_events()
memtape.record_memory_events(False)
big = [e["frames"] for e in events if e["size"] == 3_000_000 and e["action"] == "alloc"]
print(json.dumps(big))
"""


def test_the_event_recorder_records_native_stacks(libs: dict[bool, Path], tmp_path: Path) -> None:
    script = write_program(tmp_path / "events.py", EVENTS_PROGRAM)
    result = ok(python(script, str(libs[False])))
    (frames,) = json.loads(result.stdout)
    # Outermost first: the Python line, then the C chain, leaf_alloc last.
    names = [f[1] for f in frames]
    assert names[-3:] == ["outer", "middle", "leaf_alloc"], frames
    assert frames[-1][0] == str(libs[False])
    assert [f[2] for f in frames if f[0] == str(script)] == [7], frames


def test_native_needs_the_native_heap(tmp_path: Path) -> None:
    script = write_program(tmp_path / "x.py", "x = 1\n")
    result = memtape("run", "--native", "--no-native-heap", script)
    assert result.returncode == 2
    assert "--no-native-heap" in result.stderr


CALLBACK = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.cb_leaf_alloc.restype = ctypes.c_void_p
lib.cb_leaf_alloc.argtypes = [ctypes.c_size_t]
CALLBACK = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)
lib.cb_outer.restype = ctypes.c_void_p
lib.cb_outer.argtypes = [CALLBACK, ctypes.c_size_t]

def callback(n):
    return lib.cb_leaf_alloc(n)  # @tm:callback

def run():
    return lib.cb_outer(CALLBACK(callback), 3_000_000)  # @tm:outer

kept = run()  # @tm:run
"""


def test_c_python_c_reads_interleaved(tmp_path: Path) -> None:
    """Python -> C ``cb_outer`` -> Python callback -> C ``cb_leaf_alloc`` -> malloc: the
    stack shows each part where it ran, not only the C frames past the innermost Python
    frame."""
    lib = build_library("callback", tmp_path)
    script = write_program(tmp_path / "callback.py", CALLBACK)
    capture = tmp_path / "callback.mtape"
    record(script, capture, str(lib), options=("--native",))
    frames = traceback_of_block(capture)
    where = [
        ("py", f["line"]) if f["filename"] == str(script) else ("c", f["function"]) for f in frames
    ]
    expected = [
        ("c", "cb_leaf_alloc"),
        ("py", line_of(script, "callback")),
        ("c", "cb_outer"),
        ("py", line_of(script, "outer")),
        ("py", line_of(script, "run")),
    ]
    positions = [where.index(e) if e in where else -1 for e in expected]
    assert -1 not in positions and positions == sorted(positions), where
    assert positions[0] == 0, where
    # The interpreter's call machinery between the parts is left out.
    assert not any("_PyEval_EvalFrameDefault" in f["function"] for f in frames), frames
    folded = tmp_path / "callback.folded"
    ok(memtape("flamegraph", capture, "--folded", "-o", folded))
    stacks = folded.read_text(encoding="utf-8").splitlines()
    assert any(
        "cb_outer" in s and "cb_leaf_alloc" in s and s.index("cb_outer") < s.index("cb_leaf_alloc")
        for s in stacks
    ), stacks
