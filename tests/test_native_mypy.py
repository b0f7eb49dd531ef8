"""``memtape run --native`` on mypy, compiled with mypyc (the pinned wheel scripts/venv.sh
installs), type-checking a small real package (iniconfig, a dependency of pytest): the
peak lands in mypyc's native functions (``CPyDef_...``) in ``top`` and in the flame
graph, not on the Python line ``console_entry`` that starts mypy."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import iniconfig
from child_python import describe
from memtape_cli import memtape, ok, read_json

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
        # mypy's own parser (`--no-native-parser`): the native parser's thread pool is
        # where `--native` still crashes, a few runs in a hundred (SIGSEGV inside a
        # native hook on a parser thread; issue "Native memory" stays open for it).
        "-m", "mypy", "--no-incremental", "--no-native-parser",
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
