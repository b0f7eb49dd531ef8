"""MLX's foreign-memory API (``make_buffer``/``release``) through memtape's forwarding
allocator, called for real by a C++ library built here against the wheel's headers.

On the CPU build these calls exist but wrap nothing: MLX's CPU allocator keeps the base
class's ``make_buffer`` (it returns a null buffer, so the caller copies into a buffer of
its own) and ``release`` (a no-op). libmlx's one caller is the exported constructor
``array(void*, Shape, Dtype, deleter)``, which nothing in MLX's own Python extension
calls; the extension's no-copy path asks ``metal::is_available()`` first. So the test
checks what the real calls do through the forwarder: the allocator reached through the
library's own GOT is memtape's while recording and MLX's after; the wrapped memory is
copied into an MLX buffer that is recorded (``AllocNew``, on the calling line) and freed;
``make_buffer`` still gives a null buffer and neither call invents an event.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from test_mlx import HERE, PROGRAMS, TIMEOUT_S, actions, assert_counters_match, line_of

SHIM = HERE / "mlx_shim" / "foreign_buffers.cpp"


def build_shim(out: Path) -> Path:
    spec = importlib.util.find_spec("mlx")
    assert spec is not None and spec.submodule_search_locations, "mlx is not installed"
    mlx = Path(next(iter(spec.submodule_search_locations)))
    lib = out / "libmlx_foreign_shim.so"
    subprocess.run(
        ["g++", "-std=c++20", "-O1", "-shared", "-fPIC", f"-I{mlx / 'include'}", str(SHIM),
         f"-L{mlx / 'lib'}", "-lmlx", f"-Wl,-rpath,{mlx / 'lib'}", "-o", str(lib)],
        check=True,
        timeout=TIMEOUT_S,
    )  # fmt: skip
    return lib


def run_foreign(tmp_path: Path) -> dict[str, Any]:
    shim = build_shim(tmp_path)
    proc = subprocess.run(
        [sys.executable, str(PROGRAMS), "foreign", str(tmp_path / "foreign.pickle")],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**os.environ, "MEMTAPE_MLX_SHIM": str(shim)},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_foreign_memory_api_through_the_forwarder(tmp_path: Path) -> None:
    result = run_foreign(tmp_path)
    extras = result["extras"]
    assert extras["forwarded"], "the library's allocator() was not routed through memtape"
    assert extras["restored"], "stopping did not give the library MLX's allocator back"
    # make_buffer wrapped nothing (CPU), so MLX copied the memory and let it go.
    assert extras["last"] == 999.0
    assert extras["deleted"] == 1
    assert extras["made"] is None
    events = result["events"]
    counts = actions(events)
    assert counts["AllocMakeBuffer"] == 0 and counts["Release"] == 0, counts
    wrapped = [e for e in events if e["action"] == "AllocNew" and e["size"] == 4000]
    assert len(wrapped) == 1, events
    assert wrapped[0]["line"] == line_of("foreign_wrap")
    assert any(e["size"] == 4000 and e["action"].startswith("Free") for e in events), events
    assert_counters_match(result["checks"])
