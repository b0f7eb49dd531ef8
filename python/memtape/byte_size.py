"""Byte counts as people read them, shared by the CLI and the pytest plugin."""

from __future__ import annotations


def format_size(n: float) -> str:
    """``n`` bytes, e.g. ``"1.5 MiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")
