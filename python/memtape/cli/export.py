"""The recording in another tool's format, or as data:

  torch        the last --max-entries events as a PyTorch memory_viz snapshot (a
               pickle; a FILE ending in .json gets the viewer's JSON form)
  tracemalloc  the blocks live at the end as a standard-library tracemalloc snapshot
               (tracemalloc.Snapshot.load reads it)
  json         totals, the peak and the top sites
  csv          memory over time (the report's chart), one row per point: the time, the
               live bytes of the Python heap, native code and frameworks, and their total

For a --follow-children capture, json adds the combined numbers and each process (as
memtape stats --json does), tracemalloc holds every process' blocks live at its end, and
torch (one address space per snapshot) exports the root process; --pid picks one
process for any format.
"""

from __future__ import annotations

import contextlib
import io
import sys

from memtape.cli import process_set as ps
from memtape.cli.capture_file import Progress, fail, refuse_overwrite, write_text
from memtape.cli.command_parser import command_parser, whole_number
from memtape.cli.import_option import add_imports_option


def main(argv: list[str]) -> int:
    p = command_parser("export", __doc__ or "")
    p.add_argument("file", help="a capture file from memtape run")
    p.add_argument(
        "--format",
        required=True,
        choices=("torch", "tracemalloc", "json", "csv"),
        help="the format to write, one of those above (required)",
    )
    p.add_argument(
        "-o", "--output", required=True, metavar="FILE", help="the file to write (required)"
    )
    p.add_argument(
        "--max-entries",
        type=whole_number(0),
        default=100_000,
        metavar="N",
        help="torch: the events kept, the last ones (default: 100000)",
    )
    p.add_argument(
        "--force", action="store_true", help="overwrite the output file (default: refuse)"
    )
    ps.add_pid_option(p)
    add_imports_option(p)
    args = p.parse_args(argv)
    refuse_overwrite("export", args.output, args.force)
    pset = ps.open_set("export", args.file, args.pid, imports=args.imports)
    several = len(pset.processes) > 1
    capture = pset.root.capture
    progress = Progress(f"exporting {args.file}")
    try:
        if args.format == "json" and several:
            from memtape.cli import stats

            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                stats.main([args.file, "--json", "--limit", "50"])
            write_text("export", args.output, out.getvalue())
        elif args.format == "json":
            write_text("export", args.output, capture.summary_json(50))
        elif args.format == "csv":
            write_text("export", args.output, capture.timeline_csv())
        elif args.format == "torch":
            if several:
                print(
                    f"memtape export: {args.file} holds {len(pset.processes)} processes; "
                    "exporting the root (--pid PID exports another)",
                    file=sys.stderr,
                )
            as_json = args.output.endswith(".json")
            capture.export_torch(args.output, args.max_entries, as_json, progress)
        else:
            from memtape import tracemalloc

            traces = [t for p in pset.processes for t in p.capture.live_traces(progress)]
            limit = capture.nframe or max((len(t[2]) for t in traces), default=1)
            tracemalloc.Snapshot(traces, limit).dump(args.output)
    except OSError as exc:
        fail("export", str(exc))
    finally:
        progress.close()
    print(f"wrote {args.output}")
    return 0
