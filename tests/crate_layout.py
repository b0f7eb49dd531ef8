"""The module graph of a Rust crate, read from its sources: which file uses which.

A file's module path follows from where it lies (`src/a/b.rs` and `src/a/b/mod.rs` are
`a::b`, `src/lib.rs` is the root). An edge `a -> b` means a file names something of file
`b`: through `use crate::...`, `super::...`, `self::...` or a child module it declares.
A name that a module only re-exports (`pub(crate) use x::Y;`) is followed to where it is
defined, so a re-export does not make its users depend on the re-exporting file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

Module = tuple[str, ...]
T = TypeVar("T")

_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_CHAR = re.compile(r"'(?:\\.|[^'\\\n])'")
_STRING = re.compile(r'r(#*)".*?"\1|"(?:\\.|[^"\\])*"', re.S)
_LINE_COMMENT = re.compile(r"//[^\n]*")
_USE = re.compile(r"(?m)^([ \t]*)(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);")
_MOD = re.compile(r"(?m)^(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;")
_INLINE_TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{")
# A child module compiled only for tests: its `use super::*` is no dependency of the crate.
_TEST_MOD = re.compile(r"(?m)^#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;")
_PATH = re.compile(r"\b(?:crate|super|self|[a-z_][a-z0-9_]*)(?:\s*::\s*\w+)+")


@dataclass(frozen=True)
class Source:
    """One file: its module path, the child modules it declares, its imports and paths."""

    module: Module
    children: frozenset[str]
    # name -> absolute path it imports (None: from another crate), for following
    # re-exports
    imports: Mapping[str, Module | None]
    # every crate path the file names, its imports included
    paths: tuple[Module, ...]


def _strip(text: str) -> str:
    text = _BLOCK_COMMENT.sub(" ", text)
    text = _CHAR.sub("' '", text)
    text = _STRING.sub('""', text)
    return _without_inline_tests(_LINE_COMMENT.sub("", text))


def _without_inline_tests(text: str) -> str:
    """`text` less its inline `#[cfg(test)] mod x { ... }` blocks (their `super` is this
    file, and what they use is no dependency of the crate)."""
    while match := _INLINE_TEST_MOD.search(text):
        depth, end = 1, match.end()
        while depth and end < len(text):
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            end += 1
        text = text[: match.start()] + text[end:]
    return text


def _split_top(items: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, c in enumerate(items):
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(items[start:i])
            start = i + 1
    parts.append(items[start:])
    return [p.strip() for p in parts if p.strip()]


def _use_tree(tree: str, prefix: list[str]) -> Iterable[tuple[str, list[str]]]:
    """`(bound name, path)` for each leaf of a use tree (`a::{b, c::d as e}`)."""
    tree = re.sub(r"\s*(::|\{|\}|,)\s*", r"\1", tree.strip())
    if tree.endswith("}") and "{" in tree:
        head, _, body = tree.partition("{")
        base = prefix + [s for s in head.split("::") if s]
        for part in _split_top(body[:-1]):
            yield from _use_tree(part, base)
        return
    path_text, _, alias = tree.partition(" as ")
    segments = prefix + [s.strip() for s in path_text.split("::") if s.strip()]
    if segments and segments[-1] == "self":
        segments = segments[:-1]
    if segments:
        yield alias.strip() or segments[-1], segments


def _absolute(module: Module, segments: list[str]) -> Module | None:
    """The absolute path `segments` names from `module`, or None when it is external."""
    base = list(module)
    if segments[0] == "crate":
        return tuple(segments[1:])
    if segments[0] == "self":
        return tuple(base + segments[1:])
    if segments[0] == "super":
        i = 0
        while i < len(segments) and segments[i] == "super":
            if not base:
                return None
            base = base[:-1]
            i += 1
        return tuple(base + segments[i:])
    return None


def _module_of(path: Path, src: Path) -> Module:
    parts = path.relative_to(src).with_suffix("").parts
    if parts in {("lib",), ("main",)}:
        return ()
    if parts[-1] == "mod":
        parts = parts[:-1]
    return tuple(parts)


def read_sources(src: Path) -> dict[Module, Source]:
    """Every `.rs` file under `src`, parsed."""
    sources: dict[Module, Source] = {}
    texts = {_module_of(p, src): _strip(p.read_text(encoding="utf-8")) for p in src.rglob("*.rs")}
    test_only = {(*m, child) for m, text in texts.items() for child in _TEST_MOD.findall(text)}
    for module, text in sorted(texts.items()):
        if any(module[:n] in test_only for n in range(1, len(module) + 1)):
            continue
        children = frozenset(_MOD.findall(text))
        imports: dict[str, Module | None] = {}
        used: list[Module] = []
        for indent, tree in _USE.findall(text):
            # Indented: inside an inline module (`mod tests { use super::*; }`), whose
            # `super` is this file itself.
            inner = bool(indent)
            for name, segments in _use_tree(tree, []):
                if inner and segments[0] == "super":
                    segments = ["self", *segments[1:]]
                target = _absolute(module, segments)
                if target is None and segments[0] in children:
                    target = (*module, *segments)
                if not inner and name != "*":
                    imports[name] = target
                if target is not None:
                    used.append(target)
        body = _USE.sub("", text)
        for match in _PATH.finditer(body):
            segments = [s.strip() for s in match.group(0).split("::")]
            target = _absolute(module, segments)
            if target is None and segments[0] in children:
                target = (*module, *segments)
            if target is not None:
                used.append(target)
        sources[module] = Source(module, children, imports, tuple(used))
    return sources


def _resolve(sources: Mapping[Module, Source], path: Module, depth: int = 0) -> Module | None:
    """The file defining what `path` names, following re-exports."""
    for cut in range(len(path), -1, -1):
        head = path[:cut]
        if head in sources:
            rest = path[cut:]
            imports = sources[head].imports
            if rest and rest[0] in imports and depth < 16:
                target = imports[rest[0]]
                if target is None:
                    return None  # re-exported from another crate
                if target != path:
                    return _resolve(sources, (*target, *rest[1:]), depth + 1) or head
            return head
    return None


def file_graph(src: Path) -> dict[Module, set[Module]]:
    """`module -> modules it uses` for the crate rooted at `src` (no self-edges)."""
    sources = read_sources(src)
    graph: dict[Module, set[Module]] = {m: set() for m in sources}
    for module, source in sources.items():
        for path in source.paths:
            target = _resolve(sources, path)
            if target is not None and target != module:
                graph[module].add(target)
    return graph


def folder_of(module: Module, sources: Iterable[Module]) -> str:
    """The folder a module's file lies in: `""` for the crate root (lib.rs), `"."` for
    the other files beside it."""
    if not module:
        return ""
    folders = set(sources)
    # A `mod.rs` module is its own folder.
    if module in folders and any(m[: len(module)] == module and m != module for m in folders):
        return "/".join(module)
    return "/".join(module[:-1]) or "."


def folder_graph(graph: Mapping[Module, set[Module]]) -> dict[str, set[str]]:
    """`folder -> folders it uses`, from the file graph."""
    folders: dict[str, set[str]] = {}
    for module, targets in graph.items():
        a = folder_of(module, graph)
        folders.setdefault(a, set())
        for target in targets:
            b = folder_of(target, graph)
            if a != b:
                folders[a].add(b)
    return folders


def find_cycle(graph: Mapping[T, set[T]]) -> list[T] | None:
    """A cycle of `graph` (first node repeated at the end), or None when it is acyclic."""
    state: dict[T, int] = {}
    stack: list[T] = []

    def visit(node: T) -> list[T] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ()), key=str):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph, key=str):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def name(module: Module) -> str:
    """A module as a path, for messages."""
    return "::".join(module) or "lib"
