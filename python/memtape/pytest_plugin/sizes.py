"""Byte sizes as the markers and options take them ("24 MB", "512 KiB", 1024)."""

from __future__ import annotations

import re

# Like pytest-memray, KB/MB/GB are binary (1024-based), so limits carry over unchanged.
_UNITS = {
    "": 1,
    "B": 1,
    "KB": 2**10,
    "KIB": 2**10,
    "K": 2**10,
    "MB": 2**20,
    "MIB": 2**20,
    "M": 2**20,
    "GB": 2**30,
    "GIB": 2**30,
    "G": 2**30,
}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_size(value: str | int | float) -> int:
    """Bytes in ``value``; ValueError names what is wrong."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not value >= 0 or value == float("inf"):  # NaN fails the first test
            raise ValueError(f"a size must be a finite number >= 0, not {value!r}")
        return int(value)
    match = _SIZE.match(str(value))
    unit = match.group(2).upper() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(f"not a size: {value!r} (write e.g. '24 MB', '512 KiB' or 1024)")
    return int(float(match.group(1)) * _UNITS[unit])
