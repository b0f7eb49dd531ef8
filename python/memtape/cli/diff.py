"""``memtape diff``: what grew, with tracemalloc's compare_to semantics.

    memtape diff OLD NEW                  live at the end of OLD vs at the end of NEW
    memtape diff FILE --from A --to B     two moments of one file

A moment is ``start``, ``peak``, ``end``, ``marker:LABEL`` (from ``memtape.mark``) or a
time since the start like ``1.5s`` or ``250ms``. With ``--follow-children`` captures,
``--pid PID`` compares that process (in both files: the same pid, or, with two files,
``--pid`` for OLD and ``--new-pid`` for NEW); without it, the root processes.
"""

from __future__ import annotations

import argparse
import json
import re

from memtape.cli.capture_file import fail, open_capture
from memtape.cli.process_set import open_set

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
    fail("diff", f"bad moment {text!r}: use start, peak, end, marker:LABEL or a time like 1.5s")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="memtape diff", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("old", help="the earlier capture (or the only one, with --from/--to)")
    p.add_argument("new", nargs="?", help="the later capture")
    p.add_argument("--from", dest="start", default=None, help="moment in OLD (default end)")
    p.add_argument("--to", dest="stop", default=None, help="moment in NEW (default end)")
    p.add_argument("--by", choices=("lineno", "filename", "traceback"), default="lineno")
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--json", action="store_true")
    p.add_argument("--pid", type=int, default=None, help="the process to compare (OLD's)")
    p.add_argument("--new-pid", type=int, default=None, help="NEW's process (default --pid)")
    args = p.parse_args(argv)
    if args.pid is not None or args.new_pid is not None:
        args.old = _process_path(args.old, args.pid)
        if args.new is not None:
            args.new = _process_path(args.new, args.new_pid or args.pid)
    start, stop = args.start or "end", args.stop or "end"
    if args.new is None and args.start is None and args.stop is None:
        fail("diff", "give two captures, or one capture with --from and --to")
    old_spec, new_spec = moment_spec(start), moment_spec(stop)
    if args.new is None:
        specs = [s for s in (old_spec, new_spec) if s is not None]
        capture = open_capture("diff", args.old, specs)
        old = new = capture
    else:
        old = open_capture("diff", args.old, [old_spec] if old_spec else [])
        new = open_capture("diff", args.new, [new_spec] if new_spec else [])

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
        cells = ", ".join(f"{name} {value:+,} B" for name, value in change.items())
        print(f"By source (NEW - OLD): {cells}")
    return 0


def _process_path(path: str, pid: int | None) -> str:
    """The capture of process ``pid`` in the set whose root is ``path``."""
    if pid is None:
        return path
    return open_set("diff", path, pid).root.path
