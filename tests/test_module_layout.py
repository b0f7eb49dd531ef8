"""The Rust crates' module graphs: no import circle between files or folders, and folders
that depend on each other only in the pipeline's direction (README, "How it works")."""

from __future__ import annotations

from pathlib import Path

import pytest
from crate_layout import file_graph, find_cycle, folder_graph, name

ROOT = Path(__file__).resolve().parent.parent

# The crates checked, and for each the order of its folders: a folder may use only the
# folders after it. `""` is the crate root (lib.rs), which wires everything together.
PIPELINES: dict[str, list[str]] = {
    "crates/memtape-python/src": [
        "",
        "api",  # what Python calls
        "session",  # starting, draining and stopping recordings
        "intercept",  # where an event enters: PEP 445 hooks, NumPy, the ref tracer
        "native",  # where a native allocation enters (GOT hooks), and MLX
        "record",  # stack capture and the recorder
        "sinks",  # what the recorder appends to: the capture sink
        "native/unwind",  # reading the native stack
        "thread",  # the calling thread's mode, capture cache and id
        "cpython",  # reading CPython: thread state, code objects
        "cpython/frames",  # reading CPython: each version's interpreter frames
        "cpython/thread_state",  # reading CPython: the current thread state
        "arch",  # what differs between processor architectures: the seam
        "arch/x86_64",  # x86-64 Linux behind it
        "arch/aarch64",  # aarch64 Linux behind it
    ],
    "crates/memtape-core/src": [
        "",
        "report",  # reading a capture back: replay, views, symbols, HTML
        "torch_snapshot",  # the memory viewer's pickle and JSON
        "capture",  # the capture file format: records, writer, reader
        ".",  # events, stacks, the live table, the ring, trace sets
    ],
}


@pytest.mark.parametrize("crate", sorted(PIPELINES))
def test_no_file_imports_another_in_a_circle(crate: str) -> None:
    graph = file_graph(ROOT / crate)
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(name(m) for m in cycle or [])


@pytest.mark.parametrize("crate", sorted(PIPELINES))
def test_folders_use_only_the_folders_after_them(crate: str) -> None:
    folders = folder_graph(file_graph(ROOT / crate))
    order = PIPELINES[crate]
    unlisted = sorted(set(folders) - set(order))
    assert not unlisted, f"folders missing from the pipeline order: {unlisted}"
    cycle = find_cycle(folders)
    assert cycle is None, "folder circle: " + " -> ".join(f or "(root)" for f in cycle or [])
    against = sorted(
        f"{a or '(root)'} -> {b}"
        for a, targets in folders.items()
        for b in targets
        if order.index(b) <= order.index(a)
    )
    assert not against, f"dependencies against the pipeline's direction: {against}"


def write_crate(src: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = src / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return src


def test_the_checker_sees_circles_through_grouped_uses_super_and_paths(tmp_path: Path) -> None:
    src = write_crate(
        tmp_path / "src",
        {
            "lib.rs": "mod a;\nmod b;\n",
            "a/mod.rs": "pub(crate) mod x;\npub(crate) mod y;\n",
            "a/x.rs": "use super::y;\n// use crate::b::z;  (a comment, not a use)\n",
            "a/y.rs": 'fn f() { let s = "crate::a::x"; crate::b::z::g(); }\n',
            "b/mod.rs": "pub(crate) mod z;\n",
            "b/z.rs": "use crate::{a::{x as ex}, b};\npub(crate) fn g() {}\n",
        },
    )
    graph = file_graph(src)
    assert graph[("a", "x")] == {("a", "y")}
    assert graph[("a", "y")] == {("b", "z")}
    assert graph[("b", "z")] == {("a", "x"), ("b",)}
    cycle = find_cycle(graph)
    assert cycle is not None and len(cycle) == 4, cycle
    assert find_cycle(folder_graph(graph)) == ["a", "b", "a"]


def test_the_checker_follows_reexports_and_keeps_inline_test_modules_apart(
    tmp_path: Path,
) -> None:
    src = write_crate(
        tmp_path / "src",
        {
            "lib.rs": "mod n;\nmod r;\n",
            "n/mod.rs": "mod h;\npub(crate) use crate::r::state::FLAG;\n",
            "n/h.rs": "use super::FLAG;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
            "r/mod.rs": "pub(crate) mod state;\n",
            "r/state.rs": "pub(crate) static FLAG: bool = false;\n",
        },
    )
    graph = file_graph(src)
    # h names FLAG through n's re-export: it depends on r::state, not on n.
    assert graph[("n", "h")] == {("r", "state")}
    assert find_cycle(graph) is None


def test_the_checker_leaves_out_test_only_modules_and_puts_lib_apart(tmp_path: Path) -> None:
    src = write_crate(
        tmp_path / "src",
        {
            "lib.rs": "pub mod event;\npub mod capture;\npub use event::Event;\n",
            "event.rs": "pub struct Event;\n",
            "capture/mod.rs": (
                "mod reader;\npub use reader::read;\n#[cfg(test)]\nmod tests;\n"
                "#[cfg(test)]\nmod inline {\n"
                "    fn f() { super::reader::read(); crate::Event; }\n}\n"
            ),
            "capture/reader.rs": "use crate::Event;\npub fn read() {}\n",
            "capture/tests.rs": "use super::*;\nuse crate::capture::reader;\n",
        },
    )
    graph = file_graph(src)
    # the file of tests and the inline test module add nothing
    assert ("capture", "tests") not in graph
    assert graph[("capture",)] == {("capture", "reader")}
    # names re-exported by lib.rs lead to the file defining them, beside lib.rs
    assert graph[("capture", "reader")] == {("event",)}
    assert folder_graph(graph) == {"": {"."}, ".": set(), "capture": {"."}}
