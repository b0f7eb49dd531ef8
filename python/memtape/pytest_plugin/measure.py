"""One test's call recorded into its own capture: its peak, what it allocated, and the
sites holding memory at the peak and at the end (what it leaked). MLX's buffers are in it
(on the line that created each array) when the test uses MLX."""

from __future__ import annotations

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
class BodyMemory:
    """What the test's body allocated."""

    peak: int
    allocated: int
    allocations: int
    leaked: int
    peak_sites: tuple[Site, ...]
    leak_sites: tuple[Site, ...]


class Recording:
    """A capture of the test's call, into ``path``, analysed alongside (a long test's
    capture is read as it is written, on memtape's follower thread; a short one's when
    ``stop`` asks for it). The frames of ``runner_files`` below the test's own are left
    out of its stacks (and memtape's own work in both is unrecorded: see ``test_call``)."""

    def __init__(self, path: str, nodeid: str, *, native: bool, runner_files: list[str]) -> None:
        self.path = path
        meta = capture_metadata(
            command="pytest call",
            argv=[nodeid],
            nframe=NFRAME,
            min_size=0,
            native_heap=native,
            launcher_files=runner_files,
        )
        _native._follower_ready()  # its thread's start is not the test's
        _native._start_capture(path, meta, 0, native)
        self.analysis = _native._analyze_alongside(path)
        _mlx.follow("pytest", True)

    def stop(self, sites: int, keep: bool) -> BodyMemory:
        _mlx.follow("pytest", False)
        _native._stop_capture("normal", 0)
        try:
            capture = self.analysis.result()
            allocations, allocated = capture.totals
            return BodyMemory(
                peak=capture.peak[0],
                allocated=allocated,
                allocations=allocations,
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
