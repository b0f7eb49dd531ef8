"""Byte counts as people read them, shared by the CLI and the pytest plugin: the format
of memtape's Rust reports (``report/units.rs``), so one screen never mixes two."""

from __future__ import annotations

import math

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def format_size(n: float) -> str:
    """``n`` bytes, e.g. ``"512 B"``, ``"1.5 KiB"``, ``"12.3 MiB"``; below 1 KiB exact, a
    rounding up to 1024 carries to the next unit (``"1.0 MiB"``, never ``"1024.0 KiB"``)."""
    if n < 0:
        return "-" + format_size(-n)
    if n < 1024:
        return f"{int(n)} B"
    value, unit = float(n), 0
    while value >= 1024 and unit + 1 < len(_UNITS):
        value /= 1024
        unit += 1
    if math.floor(value * 10 + 0.5) / 10 >= 1024 and unit + 1 < len(_UNITS):
        value /= 1024
        unit += 1
    return f"{value:.1f} {_UNITS[unit]}"


def format_size_diff(n: float) -> str:
    """A signed size: ``"+8.1 MiB"``, ``"-12 B"``, ``"0 B"``."""
    if n == 0:
        return "0 B"
    return ("+" if n > 0 else "-") + format_size(abs(n))
