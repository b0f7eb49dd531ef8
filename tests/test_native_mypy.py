"""``memtape run --native`` on mypy, compiled with mypyc (the pinned wheel scripts/venv.sh
installs), type-checking a small real package (iniconfig, a dependency of pytest): the
peak lands in mypyc's native functions (``CPyDef_...``) in ``top`` and in the flame
graph, not on the Python line ``console_entry`` that starts mypy. mypy's native parser
(the default) runs a Rust extension, ``ast_serialize``, on a pool of threads without the
GIL: several threads unwind their native stacks at once, which once crashed memtape (two
threads handed the same unwinding cache)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import iniconfig
from child_python import describe
from memtape_cli import memtape, ok, read_json, write_program

MYPYC = "CPyDef_"


def test_mypyc_functions_in_top_and_the_flame_graph(tmp_path: Path) -> None:
    spec = importlib.util.find_spec("mypy.build")
    assert spec and spec.origin and spec.origin.endswith(".so"), "mypy is not mypyc-compiled"
    target = tmp_path / "target"
    shutil.copytree(
        Path(iniconfig.__file__).parent,
        target / "iniconfig",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    capture = tmp_path / "mypy.mtape"
    result = memtape(
        "run", "-q", "--native", "-o", capture,
        "-m", "mypy", "--no-incremental",
        "--cache-dir", tmp_path / "cache", "iniconfig",
        cwd=target, timeout=240,
        # A crash prints every thread's Python stack.
        env={"PYTHONFAULTHANDLER": "1"},
    )  # fmt: skip
    assert result.returncode == 0, describe(result)
    top = read_json("top", capture, "--limit", "100000")
    mypyc = [s for s in top["sites"] if s["frames"][0]["function"].startswith(MYPYC)]
    assert mypyc, top["sites"][:20]
    share = sum(s["bytes"] for s in mypyc) / top["total_bytes"]
    assert share > 0.2, (share, top["sites"][:20])
    assert ok(memtape("top", capture)).stdout.count(MYPYC) >= 3
    folded = tmp_path / "mypy.folded"
    ok(memtape("flamegraph", capture, "--folded", "-o", folded))
    stacks = folded.read_text(encoding="utf-8").splitlines()
    assert sum(MYPYC in s for s in stacks) > 100, stacks[:20]
    html = tmp_path / "mypy.html"
    ok(memtape("flamegraph", capture, "-o", html))
    assert MYPYC in html.read_text(encoding="utf-8")


PARSER_THREADS = """
import glob, os, sys, threading
import ast_serialize, mypy

stdlib = os.path.join(os.path.dirname(mypy.__file__), "typeshed", "stdlib")
files = sorted(glob.glob(stdlib + "/**/*.pyi", recursive=True))
threads = int(sys.argv[1])

def parse(k):
    for name in files[k::threads]:
        ast_serialize.parse(  # the parser's line
            name, None, skip_function_bodies=False, python_version=(3, 11),
            platform="linux", always_true=[], always_false=[], cache_version=5,
        )

pool = [threading.Thread(target=parse, args=(k,)) for k in range(threads)]
for t in pool:
    t.start()
for t in pool:
    t.join()
print(len(files))
"""


def test_parser_threads_unwind_at_once(tmp_path: Path) -> None:
    """Four threads parse typeshed's stdlib stubs with the Rust parser, each unwinding
    through the parser's frames on almost every allocation, several at a time. Before the
    fix, a thread that found the first cache slot of its pool busy released it on its way
    to the next, so a third thread could take it: two threads then shared one unwinding
    cache and one jumped through a corrupted rule (about 1 run in 20 on the developers'
    machine, 3 in 4 with some builds). Three runs per test; each must end cleanly and show
    native frames of the parser under the Python line that called it."""
    script = write_program(tmp_path / "parse.py", PARSER_THREADS)
    for run in range(3):
        capture = tmp_path / f"parse{run}.mtape"
        result = memtape(
            "run", "-q", "--native", "-o", capture, script, "4",
            timeout=120, env={"PYTHONFAULTHANDLER": "1"},
        )  # fmt: skip
        assert result.returncode == 0, describe(result)
        assert int(result.stdout) > 500, result.stdout
    folded = tmp_path / "parse.folded"
    ok(memtape("flamegraph", capture, "--folded", "-o", folded))
    stacks = folded.read_text(encoding="utf-8").splitlines()
    parser = [s for s in stacks if "ruff_python_parser" in s or "ast_serialize" in s]
    assert parser, stacks[:20]
    source = script.read_text(encoding="utf-8").splitlines()
    line = next(i for i, text in enumerate(source, 1) if "the parser's line" in text)
    assert any(f"parse.py:{line})" in s for s in parser), parser[:5]
