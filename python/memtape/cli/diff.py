"""What grew, with tracemalloc's compare_to semantics: the sites that grew most first.

  memtape diff OLD NEW                 live at the end of OLD vs at the end of NEW
  memtape diff FILE --from A --to B    two moments of one capture

A moment is start, peak, end, marker:LABEL (from memtape.mark) or a time since the
start within the recording, like 1.5s or 250ms (ns, us, ms or s). With
--follow-children captures, --pid PID compares that process (in both files: the same
pid, or, with two files, --pid for OLD and --new-pid for NEW); without it, the root
processes.
"""

from __future__ import annotations

import argparse
import json
import re

from memtape import _native
from memtape.byte_size import format_size_diff
from memtape.cli.capture_file import fail, open_capture
from memtape.cli.command_parser import command_parser
from memtape.cli.import_option import add_imports_option
from memtape.cli.process_set import open_set
from memtape.cli.site_options import add_site_options

_TIME = re.compile(r"^(\d+(?:\.\d*)?)(ns|us|ms|s)$")
_SCALE = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def moment_spec(text: str) -> str | None:
    """The native moment spec for a user's moment, None for peak/end/start."""
    if text in ("start", "peak", "end"):
        return None
    if text.startswith("marker:") and len(text) > len("marker:"):
        return text
    m = _TIME.match(text)
    if m:
        return f"time:{int(float(m.group(1)) * _SCALE[m.group(2)])}"
    raise argparse.ArgumentTypeError(
        f"bad moment {text!r}: use start, peak, end, marker:LABEL or a time like 1.5s"
    )


def moment(text: str) -> str:
    """An option's type: a moment (checked here; its time against the file later)."""
    moment_spec(text)
    return text


def check_within(
    p: argparse.ArgumentParser, option: str, text: str, path: str, capture: _native.Capture
) -> None:
    """A usage error when a time moment lies past the end of the recording."""
    spec = moment_spec(text)
    if spec is None or not spec.startswith("time:"):
        return
    duration_ns = int(json.loads(capture.summary_json(0)).get("duration_ns") or 0)
    if int(spec[len("time:") :]) > duration_ns:
        p.error(
            f"argument {option}: {text} is past the end of the recording: {path} spans "
            f"0 to {duration_ns / 1e9:.3f}s"
        )


def main(argv: list[str]) -> int:
    p = command_parser("diff", __doc__ or "")
    p.add_argument("old", help="the earlier capture (or the only one, with --from/--to)")
    p.add_argument("new", nargs="?", help="the later capture")
    p.add_argument(
        "--from",
        dest="start",
        type=moment,
        default=None,
        metavar="MOMENT",
        help="the moment in OLD (default: end)",
    )
    p.add_argument(
        "--to",
        dest="stop",
        type=moment,
        default=None,
        metavar="MOMENT",
        help="the moment in NEW, or in OLD when it is the only capture (default: end)",
    )
    add_site_options(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument(
        "--pid",
        type=int,
        default=None,
        metavar="PID",
        help="with --follow-children captures: the process to compare, OLD's with two files "
        "(default: the root process)",
    )
    p.add_argument(
        "--new-pid",
        type=int,
        default=None,
        metavar="PID",
        help="with two --follow-children captures: NEW's process (default: --pid)",
    )
    add_imports_option(p)
    args = p.parse_args(argv)
    if args.pid is not None or args.new_pid is not None:
        args.old = _process_path(args.old, args.pid)
        if args.new is not None:
            args.new = _process_path(args.new, args.new_pid or args.pid)
    start, stop = args.start or "end", args.stop or "end"
    if args.new is None and args.start is None and args.stop is None:
        p.error("give two captures, or one capture with --from and --to")
    old_spec, new_spec = moment_spec(start), moment_spec(stop)
    if args.new is None:
        specs = [s for s in (old_spec, new_spec) if s is not None]
        capture = open_capture("diff", args.old, specs, args.imports)
        old = new = capture
    else:
        old = open_capture("diff", args.old, [old_spec] if old_spec else [], args.imports)
        new = open_capture("diff", args.new, [new_spec] if new_spec else [], args.imports)
    check_within(p, "--from", start, args.old, old)
    check_within(p, "--to", stop, args.new or args.old, new)

    def where(text: str, spec: str | None, same_file_index: int) -> str:
        if spec is None:
            return text
        return f"moment:{same_file_index}"

    old_at = where(start, old_spec, 0)
    new_at = where(stop, new_spec, 1 if (args.new is None and old_spec) else 0)
    try:
        out = new.diff(old, args.by, new_at, old_at, args.limit, args.json)
    except ValueError as exc:
        fail("diff", str(exc))
    before, after = old.by_source(old_at), new.by_source(new_at)
    if before is None or after is None or not any(b for n, b in before + after if n != "python"):
        print(out)
        return 0
    change = {name: dict(after)[name] - bytes_ for name, bytes_ in before}
    if args.json:
        data = json.loads(out)
        data["by_source_diff"] = change
        print(json.dumps(data, separators=(",", ":")))
    else:
        print(out)
        cells = ", ".join(f"{name} {format_size_diff(value)}" for name, value in change.items())
        print(f"By source (NEW - OLD): {cells}")
    return 0


def _process_path(path: str, pid: int | None) -> str:
    """The capture of process ``pid`` in the set whose root is ``path``."""
    if pid is None:
        return path
    return open_set("diff", path, pid).root.path
