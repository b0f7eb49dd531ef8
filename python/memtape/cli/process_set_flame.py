"""One flame graph for a ``--follow-children`` set: a frame per process under the root,
each process' own graph beneath it.

Each process' graph comes from its capture's own flame graph page (the JSON block the
page's script reads: ``strings``, ``frames`` as ``[function, file, line]`` string indexes,
``nodes`` in preorder as ``[frame, bytes, children]``); the graphs are joined under one
root and put back into the first page, so the combined page is the same viewer.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

from memtape.byte_size import format_size
from memtape.cli import process_set as ps

_DATA = re.compile(r'(<script type="application/json" class="fg-data">)(.*?)(</script>)', re.S)


def _live_set(
    pset: ps.ProcessSet, p: ps.Process, at: str, combined: ps.Combined | None
) -> tuple[Any, str] | None:
    """The capture and the table name of ``p``'s live set at the combined peak or end."""
    if at == "end":
        return p.capture, "end"
    assert combined is not None
    moment = ps.moment_in(p, combined)
    if moment is None:
        return None
    return pset.analyze_at(p, moment), "moment:0"


def _script_json(data: dict[str, Any]) -> str:
    """JSON safe inside a ``<script>`` block."""
    text = json.dumps(data, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def combined_page(pset: ps.ProcessSet, at: str, title: str, subtitle: str) -> str:
    """The combined flame graph page."""
    combined = pset.combined() if at == "peak" else None
    strings: list[str] = []
    index: dict[str, int] = {}
    frames: list[list[int]] = []
    nodes: list[list[int]] = [[-1, 0, 0]]
    page = ""

    def intern(s: str) -> int:
        if s not in index:
            index[s] = len(strings)
            strings.append(s)
        return index[s]

    for p in pset.processes:
        live = _live_set(pset, p, at, combined)
        if live is None:
            continue
        capture, where = live
        one = capture.flamegraph_html(where, title, subtitle)
        m = _DATA.search(one)
        if m is None:
            continue
        page = page or one
        data = json.loads(m.group(2))
        own = data["nodes"]
        if not own or own[0][1] <= 0:
            continue
        # No file: the frame reads "pid N (how)" (the page's script shows "(file:line)"
        # only for frames that have a file).
        frames.append([intern(f"pid {p.pid} ({p.start_method})"), intern(""), 0])
        nodes.append([len(frames) - 1, own[0][1], own[0][2]])
        remap: dict[int, int] = {}
        for i, (function, filename, line) in enumerate(data["frames"]):
            frames.append(
                [intern(data["strings"][function]), intern(data["strings"][filename]), line]
            )
            remap[i] = len(frames) - 1
        nodes.extend([remap[frame], value, children] for frame, value, children in own[1:])
        nodes[0][1] += own[0][1]
        nodes[0][2] += 1
    if not page:
        page = pset.root.capture.flamegraph_html("end", title, subtitle)
        m = _DATA.search(page)
    total = nodes[0][1]
    merged = _script_json({"strings": strings, "frames": frames, "nodes": nodes})
    page = _DATA.sub(lambda m: m.group(1) + merged + m.group(3), page, count=1)
    page = re.sub(r'data-total-bytes="\d+"', f'data-total-bytes="{total}"', page, count=1)
    return re.sub(
        r'(<span id="total-bytes" data-bytes=")\d+(">)[^<]*',
        lambda m: f"{m.group(1)}{total}{m.group(2)}{html.escape(format_size(total))}",
        page,
        count=1,
    )


def combined_folded(pset: ps.ProcessSet, at: str) -> str:
    """Folded stacks of every process, each under a ``pid N (how)`` frame."""
    combined = pset.combined() if at == "peak" else None
    lines: list[str] = []
    for p in pset.processes:
        live = _live_set(pset, p, at, combined)
        if live is None:
            continue
        capture, where = live
        head = f"pid {p.pid} ({p.start_method})"
        lines.extend(f"{head};{line}" for line in capture.folded(where).splitlines() if line)
    return "".join(f"{line}\n" for line in lines)
