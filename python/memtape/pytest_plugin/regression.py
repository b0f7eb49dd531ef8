"""``--memtape-fail-on-increase``: a test fails when its body's peak rose above the last
passing run's by more than a tolerance (default 10% plus 1 MiB: one pymalloc arena, or
the allocator's page rounding, flips an exact comparison from run to run)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from memtape.byte_size import format_size
from memtape.pytest_plugin.sizes import parse_size

DEFAULT_TOLERANCE = "10%+1 MiB"


@dataclass(frozen=True)
class Tolerance:
    """How far a peak may rise: ``percent`` of the last one plus ``bytes``."""

    percent: float
    bytes: int

    @classmethod
    def parse(cls, text: str) -> Tolerance:
        """``"10%"``, ``"2 MB"`` or ``"10%+1 MiB"``."""
        percent, size = 0.0, 0
        for part in (p.strip() for p in text.split("+")):
            if part.endswith("%"):
                percent += float(part[:-1])
            else:
                size += parse_size(part)
        if percent < 0:
            raise ValueError(f"a tolerance cannot be negative: {text!r}")
        return cls(percent, size)

    def allowed(self, last: int) -> int:
        return int(last * (1 + self.percent / 100)) + self.bytes

    def __str__(self) -> str:
        return f"{self.percent:g}% + {format_size(self.bytes)}"


class PeakBaseline:
    """Each test's last passing peak, in pytest's cache (``memtape/peak/<test>``)."""

    def __init__(self, cache: pytest.Cache, tolerance: Tolerance) -> None:
        self.cache, self.tolerance = cache, tolerance

    def check(self, key: str, peak: int) -> str | None:
        """The failure message, or None (then ``peak`` becomes the baseline)."""
        last = self.cache.get(f"memtape/peak/{key}", None)
        if isinstance(last, int) and peak > self.tolerance.allowed(last):
            return (
                f"Test's peak rose from {format_size(last)} (last passing run) to "
                f"{format_size(peak)}, more than the tolerance ({self.tolerance})"
            )
        self.cache.set(f"memtape/peak/{key}", peak)
        return None
