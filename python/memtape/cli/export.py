"""``memtape export FILE --format torch|tracemalloc|json|csv -o OUT``.

- ``torch``: the last ``--max-entries`` events as a PyTorch memory_viz snapshot (pickle;
  ``OUT.json`` gets the viewer's JSON form);
- ``tracemalloc``: the blocks live at the end as a standard-library tracemalloc
  snapshot (``tracemalloc.Snapshot.load`` reads it);
- ``json``: totals, peak and top sites;
- ``csv``: memory over time (the report's chart), one row per point: time, live bytes
  of the Python heap, native code and frameworks, and their total.

For a ``--follow-children`` capture, ``json`` adds the combined numbers and each process
(as ``memtape stats --json``), ``tracemalloc`` holds every process' blocks live at its
end, and ``torch`` (one address space per snapshot) exports the root process; ``--pid``
picks one process for any format.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys

from memtape.cli import process_set as ps
from memtape.cli.capture_file import Progress, fail, refuse_overwrite, write_text


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="memtape export", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("file", help="a capture file from memtape run")
    p.add_argument("--format", required=True, choices=("torch", "tracemalloc", "json", "csv"))
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--max-entries", type=int, default=100_000, help="torch: events kept")
    p.add_argument("--force", action="store_true", help="overwrite the output file")
    ps.add_pid_option(p)
    args = p.parse_args(argv)
    refuse_overwrite("export", args.output, args.force)
    pset = ps.open_set("export", args.file, args.pid)
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
