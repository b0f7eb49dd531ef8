"""One test phase recorded into its own capture: its peak, what it allocated, and the
sites holding memory at the peak and at the end (what it leaked). MLX's buffers are in it
(on the line that created each array) when the test uses MLX."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from memtape import _mlx, _native
from memtape.capture_metadata import capture_metadata

# Frames kept per stack: deep enough for a test's own code under pytest's.
NFRAME = 64

Frames = tuple[tuple[str, str, int], ...]  # (filename, function, line), innermost first


@dataclass(frozen=True)
class Site:
    """Memory allocated from one stack (innermost frame first)."""

    frames: Frames
    bytes: int
    count: int


@dataclass(frozen=True)
class PhaseMemory:
    """What one phase (setup or the body) allocated."""

    peak: int
    allocated: int
    allocations: int
    leaked: int
    peak_sites: tuple[Site, ...]
    leak_sites: tuple[Site, ...]


class Recording:
    """A capture of one phase, into ``path``; ``stop`` reads it back."""

    def __init__(self, path: str, nodeid: str, phase: str, *, native: bool) -> None:
        self.path = path
        meta = capture_metadata(
            command=f"pytest {phase}",
            argv=[nodeid],
            nframe=NFRAME,
            min_size=0,
            native_heap=native,
            launcher_files=None,
        )
        _native._start_capture(path, meta, 0, native)
        _mlx.follow("pytest", True)

    def stop(self, sites: int, keep: bool) -> PhaseMemory:
        _mlx.follow("pytest", False)
        _native._stop_capture("normal", 0)
        try:
            capture = _native.analyze_capture(self.path, time_window=False)
            summary = json.loads(capture.summary_json(0))
            return PhaseMemory(
                peak=capture.peak[0],
                allocated=summary["totals"]["bytes_allocated"],
                allocations=summary["totals"]["allocs"],
                leaked=capture.end_bytes,
                peak_sites=_sites(capture, "peak", sites),
                leak_sites=_sites(capture, "end", 1_000_000),
            )
        finally:
            if not keep:
                os.unlink(self.path)


def _sites(capture: _native.Capture, at: str, limit: int) -> tuple[Site, ...]:
    return tuple(
        Site(tuple(frames), size, count)
        for frames, size, count in capture.sites("traceback", at, limit, None)
    )
