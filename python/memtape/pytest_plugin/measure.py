"""One test's call recorded into its own capture: its peak, what it allocated, and the
sites holding memory at the peak and at the end (what it leaked). MLX's buffers are in it
(on the line that created each array) when the test uses MLX."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from memtape import _mlx, _native
from memtape.capture_metadata import MetadataSeries, capture_metadata

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
    leak_sites: tuple[Site, ...]  # () unless asked for


class Recording:
    """A capture of the test's call, into ``path``, analysed alongside (a long test's
    capture is read as it is written, on memtape's follower thread; a short one's when
    ``stop`` asks for it). The frames of ``runner_files`` below the test's own are left
    out of its stacks (and memtape's own work in both is unrecorded: see ``test_call``)."""

    def __init__(
        self, path: str, nodeid: str, *, native: bool, runner_files: list[str], keep: bool
    ) -> None:
        self.path = path
        # A capture kept for the user's reports notes the process' memory at its start and
        # end; one read and deleted at once does not (the readings cost more than a tiny
        # test's capture), and shares the rest of its metadata with the test before.
        self.keep = keep
        if keep:
            meta = capture_metadata(
                command="pytest call",
                argv=[nodeid],
                nframe=NFRAME,
                min_size=0,
                native_heap=native,
                launcher_files=runner_files,
            )
        else:
            meta = _metadata_series(native, runner_files).for_argv([nodeid])
        _native._follower_ready()  # its thread's start is not the test's
        # Not kept: held in memory while small (no file is made for most tests).
        _native._start_capture(path, meta, 0, native, False, not keep)
        self.analysis = _native._analyze_alongside(path)
        _mlx.follow("pytest", True)

    def stop(self, sites: int, leaks: bool) -> BodyMemory:
        """The test's numbers; ``leaks``: with the sites holding memory at the end (only a
        ``limit_leaks`` test needs them)."""
        _mlx.follow("pytest", False)
        try:
            _native._stop_capture("normal", 0, self.keep)
            # Not kept: removed once read, off this thread.
            capture = self.analysis.result("hide", not self.keep)
        except BaseException:
            if not self.keep:
                with contextlib.suppress(OSError):
                    os.unlink(self.path)
            raise
        allocations, allocated = capture.totals
        return BodyMemory(
            peak=capture.peak[0],
            allocated=allocated,
            allocations=allocations,
            leaked=capture.end_bytes,
            peak_sites=_sites(capture, "peak", sites),
            leak_sites=_sites(capture, "end", 1_000_000) if leaks else (),
        )


def _sites(capture: _native.Capture, at: str, limit: int) -> tuple[Site, ...]:
    return tuple(
        Site(tuple(frames), size, count)
        for frames, size, count in capture.sites("traceback", at, limit, None)
    )


# The last series' settings (native heap, runner files) and its shared metadata.
_series: list[tuple[tuple[bool, list[str]], MetadataSeries]] = []


def _metadata_series(native: bool, runner_files: list[str]) -> MetadataSeries:
    """The shared metadata of the captures made with these settings (made again when they
    change: the runner's files do when the stack or the plugins do)."""
    settings = (native, runner_files)
    if not _series or _series[0][0] != settings:
        series = MetadataSeries(
            command="pytest call",
            nframe=NFRAME,
            min_size=0,
            native_heap=native,
            launcher_files=runner_files,
        )
        _series[:] = [(settings, series)]
    return _series[0][1]
