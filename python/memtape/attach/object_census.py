"""What the target held before memtape arrived: its live Python objects counted by
type, taken inside the target at attach, before the capture starts (memory allocated
before the attach has no traceback; this says at least what kind of objects hold it).

The objects are those the garbage collector tracks (containers, instances) and those
they refer to directly (the strings, bytes, numbers and arrays inside them), each
counted once; sizes are ``sys.getsizeof``: an object's own memory, not what it refers
to (a list's size is its array of pointers, its items count under their own types)."""

from __future__ import annotations

import gc
import sys
import time
from typing import Any

#: The types kept in the census, largest total first.
TOP_TYPES = 25


def _type_name(kind: type) -> str:
    module = getattr(kind, "__module__", None)
    name = getattr(kind, "__qualname__", kind.__name__)
    return name if module in (None, "builtins") else f"{module}.{name}"


def take() -> dict[str, Any]:
    """The census: totals and the top types by total size (JSON-ready)."""
    started = time.perf_counter()
    counts: dict[type, list[int]] = {}
    seen: set[int] = set()
    tracked = gc.get_objects()
    for holder in tracked:
        seen.add(id(holder))
    pending: list[object] = list(tracked)
    for holder in tracked:
        for referent in gc.get_referents(holder):
            if id(referent) not in seen:
                seen.add(id(referent))
                pending.append(referent)
    del tracked
    for obj in pending:
        try:
            size = sys.getsizeof(obj)
        except Exception:  # noqa: BLE001 - a broken __sizeof__ must not stop the census
            size = 0
        entry = counts.setdefault(type(obj), [0, 0])
        entry[0] += 1
        entry[1] += size
    objects = len(pending)
    del pending, seen
    ranked = sorted(counts.items(), key=lambda item: item[1][1], reverse=True)
    return {
        "objects": objects,
        "bytes": sum(entry[1] for entry in counts.values()),
        "types": [
            {"type": _type_name(kind), "count": count, "bytes": size}
            for kind, (count, size) in ranked[:TOP_TYPES]
        ],
        "other_types": max(0, len(ranked) - TOP_TYPES),
        "seconds": round(time.perf_counter() - started, 4),
    }
