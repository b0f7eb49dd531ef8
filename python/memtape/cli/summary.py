"""What `memtape run` prints when the program ends (on stderr: stdout is the program's)."""

from __future__ import annotations

import sys

from memtape import _native
from memtape.byte_size import format_size


def print_run_summary(
    path: str,
    events: int,
    size: int,
    top: int = 5,
    *,
    follower: _native.CaptureFollower | None = None,
    imports: str = "hide",
) -> None:
    """The peak, where it happened, the top sites at the peak, and the next commands.

    ``follower`` has analyzed the file while it was written: only its last blocks are
    left to read. Without one (or should it fail) the file is read now. ``imports``: how
    the sites show import machinery (``--imports``)."""
    err = sys.stderr
    print(f"\nmemtape: recorded {events:,} events into {path} ({format_size(size)})", file=err)
    try:
        capture = _analysis(path, follower, imports)
    except (OSError, ValueError) as exc:
        print(f"memtape: cannot summarize {path}: {exc}", file=err)
        return
    peak_bytes, peak_s = capture.peak
    split = capture.by_source_text("peak")
    by_source = "" if split is None else f" ({split})"
    print(
        f"memtape: peak {format_size(peak_bytes)}{by_source} at {peak_s:.3f} s; "
        "top sites at the peak:",
        file=err,
    )
    print(capture.top_text("lineno", "peak", top), file=err)
    _print_rss(capture.rss_text())
    _print_children(path, capture.metadata_json)
    print_read_hints(path)


def print_read_hints(path: str) -> None:
    """The commands that read the capture."""
    print("read it with:", file=sys.stderr)
    for command in ("stats", "top", "flamegraph {} -o flamegraph.html", "report {} -o report.html"):
        line = command.format(path) if "{}" in command else f"{command} {path}"
        print(f"  memtape {line}", file=sys.stderr)


def _print_rss(text: str) -> None:
    """The run's RSS accounted for: the start, what the program added, memtape's own,
    what memtape did not see."""
    for i, line in enumerate(text.splitlines()):
        print(f"memtape: {line}" if i == 0 else f"  {line}", file=sys.stderr)


def _analysis(path: str, follower: _native.CaptureFollower | None, imports: str) -> _native.Capture:
    if follower is not None:
        try:
            return follower.finish(path, imports=imports)
        except (OSError, ValueError, RuntimeError):
            pass
    return _native.analyze_capture(path, time_window=False, imports=imports)


def _print_children(path: str, metadata_json: str) -> None:
    """With ``--follow-children``: the child captures written so far."""
    import json

    from memtape.cli.process_set import children_of

    children = children_of(path, json.loads(metadata_json or "{}"))
    if not children:
        return
    shown = ", ".join(children[:4]) + (", ..." if len(children) > 4 else "")
    print(
        f"memtape: {len(children)} child process captures beside it ({shown}); every "
        "report below reads them all (combined), --pid PID reads one",
        file=sys.stderr,
    )
