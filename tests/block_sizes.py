"""The size of the memory block CPython allocates for a given object, where it differs
between versions."""

from __future__ import annotations

import sys


def bytearray_buffer(n: int) -> int:
    """The block holding the bytes of ``bytearray(n)``: ``n + 1`` bytes (with its trailing
    NUL) up to 3.14; from 3.15 the bytes live in a bytes object, header included."""
    if sys.version_info < (3, 15):
        return n + 1
    return sys.getsizeof(bytes(n))
