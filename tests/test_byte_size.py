"""``memtape.byte_size``: the Python side writes sizes exactly as the Rust reports do
(``report/units.rs``), so one screen never mixes two formats."""

from __future__ import annotations

import pytest
from memtape.byte_size import format_size, format_size_diff

KiB, MiB = 2**10, 2**20


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1536, "1.5 KiB"),
        (12_897_485, "12.3 MiB"),
        # A rounding up to 1024 carries to the next unit, as units.rs does.
        (MiB - 1, "1.0 MiB"),
        (1024 * MiB - 1, "1.0 GiB"),
        (2**64 - 1, "16.0 EiB"),
    ],
)
def test_format_size_matches_the_rust_reports(n: int, text: str) -> None:
    assert format_size(n) == text


def test_signed_sizes() -> None:
    assert format_size_diff(8_456_986) == "+8.1 MiB"
    assert format_size_diff(-2 * KiB) == "-2.0 KiB"
    assert format_size_diff(5) == "+5 B"
    assert format_size_diff(0) == "0 B"
    assert format_size(-12) == "-12 B"
