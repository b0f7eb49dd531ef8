"""What every report says about a capture ``memtape attach`` made: memory allocated
before the attach has no traceback, and what was alive then (the census)."""

from __future__ import annotations

import html
import json
import time
from typing import Any

from memtape import _native
from memtape.byte_size import format_size


def describe_census(census: dict[str, Any], limit: int = 10) -> list[str]:
    """The census as lines of text (``memtape stats`` and ``memtape attach`` print it)."""
    lines = [
        f"{census['objects']:,} objects, {format_size(int(census['bytes']))} "
        f"(counted in {float(census.get('seconds', 0)):.2f} s)"
    ]
    rows = [
        (t["type"], f"{t['count']:,}", format_size(int(t["bytes"])))
        for t in census["types"][:limit]
    ]
    if rows:
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        for name, count, size in rows:
            lines.append(f"  {size.rjust(widths[2])}  {count.rjust(widths[1])}  {name}")
    return lines


def attached_info(capture: _native.Capture) -> dict[str, Any] | None:
    """The metadata's ``attached`` record (None: the capture was not attached)."""
    meta = json.loads(capture.metadata_json)
    attached = meta.get("attached")
    if not isinstance(attached, dict):
        return None
    return attached | {"pid": meta.get("pid")}


def attach_note(attached: dict[str, Any]) -> str:
    """One line: when memtape attached, and that the memory allocated before is not
    attributed."""
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(int(attached["time_ns"]) / 1e9))
    return (
        f"attached to process {attached['pid']} at {when}: memory allocated before is not "
        "attributed (it has no traceback, and its frees are not counted)"
    )


def census_lines(attached: dict[str, Any], limit: int = 10) -> list[str]:
    """The census taken at the attach, as text (none when it was skipped)."""
    census = attached.get("census")
    if not isinstance(census, dict):
        return []
    first, *rest = describe_census(census, limit)
    return [f"Alive at the attach: {first}; the largest types:", *rest]


def html_banner(attached: dict[str, Any]) -> str:
    """The note and the census for the top of an HTML page."""
    lines = census_lines(attached, limit=25)
    census = f"<pre>{html.escape(chr(10).join(lines))}</pre>" if lines else ""
    return (
        '<section class="attach-note" style="border:1px solid #c90;padding:0.5em 1em;'
        f'margin:0.5em 0"><p><strong>{html.escape(attach_note(attached))}</strong></p>'
        f"{census}</section>\n"
    )


def with_banner(page: str, attached: dict[str, Any] | None) -> str:
    """``page`` with the banner right after its ``<body>`` (unchanged when not attached)."""
    if attached is None or "<body>" not in page:
        return page
    return page.replace("<body>", "<body>\n" + html_banner(attached), 1)
