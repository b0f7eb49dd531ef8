"""What `memtape run` prints when the program ends (on stderr: stdout is the program's)."""

from __future__ import annotations

import sys
from typing import NamedTuple

from memtape import _native
from memtape.byte_size import format_size
from memtape.cli.summary_process import SUMMARY_TOP


class RunSummary(NamedTuple):
    """What the summary shows of a capture: made where the capture was analyzed (the
    summary process, or this one), printed here."""

    peak_bytes: int
    peak_s: float
    #: The peak split by source, or None with one source.
    by_source: str | None
    #: The top sites at the peak, as a table.
    top: str
    #: The run's RSS accounted for (empty for captures without the readings).
    rss: str
    metadata_json: str

    @classmethod
    def of(cls, capture: _native.Capture, top: int) -> RunSummary:
        peak_bytes, peak_s = capture.peak
        return cls(
            peak_bytes,
            peak_s,
            capture.by_source_text("peak"),
            capture.top_text("lineno", "peak", top),
            capture.rss_text(),
            capture.metadata_json,
        )

    @classmethod
    def from_json(cls, text: str) -> RunSummary:
        """The summary process' answer; ValueError for an error or a malformed one."""
        import json

        fields = json.loads(text)
        if not isinstance(fields, dict) or "error" in fields:
            raise ValueError(str(fields.get("error") if isinstance(fields, dict) else text))
        try:
            return cls(**{name: fields[name] for name in cls._fields})
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed summary: {exc}") from exc


def print_run_summary(
    path: str,
    events: int,
    size: int,
    top: int = SUMMARY_TOP,
    *,
    follower: _native.CaptureFollower | None = None,
    imports: str = "hide",
) -> None:
    """The peak, where it happened, the top sites at the peak, and the next commands.

    ``follower`` has had the summary process analyze the file while it was written: only
    its last blocks are left to read there, with ``imports`` and ``top`` as given when it
    started. Without one (or should it fail) the file is read now, here. ``imports``: how
    the sites show import machinery (``--imports``)."""
    err = sys.stderr
    print(f"\nmemtape: recorded {events:,} events into {path} ({format_size(size)})", file=err)
    try:
        summary = _summary(path, follower, imports, top)
    except (OSError, ValueError) as exc:
        print(f"memtape: cannot summarize {path}: {exc}", file=err)
        return
    by_source = "" if summary.by_source is None else f" ({summary.by_source})"
    print(
        f"memtape: peak {format_size(summary.peak_bytes)}{by_source} at {summary.peak_s:.3f} s; "
        "top sites at the peak:",
        file=err,
    )
    print(summary.top, file=err)
    _print_rss(summary.rss)
    _print_children(path, summary.metadata_json)
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


def _summary(
    path: str, follower: _native.CaptureFollower | None, imports: str, top: int
) -> RunSummary:
    if follower is not None:
        try:
            return RunSummary.from_json(follower.finish())
        except (OSError, ValueError, RuntimeError):
            pass
    capture = _native.analyze_capture(path, time_window=False, imports=imports)
    return RunSummary.of(capture, top)


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
