"""``memtape export FILE --format torch|tracemalloc|json|csv -o OUT``.

- ``torch``: the last ``--max-entries`` events as a PyTorch memory_viz snapshot (pickle;
  ``OUT.json`` gets the viewer's JSON form);
- ``tracemalloc``: the blocks live at the end as a standard-library tracemalloc
  snapshot (``tracemalloc.Snapshot.load`` reads it);
- ``json``: totals, peak and top sites;
- ``csv``: memory over time (the report's chart), one row per point: time, live bytes
  of the Python heap, native code and frameworks, and their total.
"""

from __future__ import annotations

import argparse

from memtape.cli.capture_file import Progress, fail, open_capture, refuse_overwrite, write_text


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="memtape export", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("file", help="a capture file from memtape run")
    p.add_argument("--format", required=True, choices=("torch", "tracemalloc", "json", "csv"))
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--max-entries", type=int, default=100_000, help="torch: events kept")
    p.add_argument("--force", action="store_true", help="overwrite the output file")
    args = p.parse_args(argv)
    refuse_overwrite("export", args.output, args.force)
    capture = open_capture("export", args.file)
    progress = Progress(f"exporting {args.file}")
    try:
        if args.format == "json":
            write_text("export", args.output, capture.summary_json(50))
        elif args.format == "csv":
            write_text("export", args.output, capture.timeline_csv())
        elif args.format == "torch":
            as_json = args.output.endswith(".json")
            capture.export_torch(args.output, args.max_entries, as_json, progress)
        else:
            from memtape import tracemalloc

            traces = capture.live_traces(progress)
            limit = capture.nframe or max((len(t[2]) for t in traces), default=1)
            tracemalloc.Snapshot(traces, limit).dump(args.output)
    except OSError as exc:
        fail("export", str(exc))
    finally:
        progress.close()
    print(f"wrote {args.output}")
    return 0
