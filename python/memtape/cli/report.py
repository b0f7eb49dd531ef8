"""One self-contained HTML page that works offline: memory over time, the flame graph
at the peak, the top sites, leaks and the run's metadata. Click the chart for the memory
live at a moment, drag across it for what a stretch of time allocated and kept; the
timeline downloads as CSV.

For a --follow-children capture: a page with a process selector (all processes
combined, or each one's own report); --pid writes one process' report."""

from __future__ import annotations

from memtape.cli import process_set as ps
from memtape.cli.attach_note import attached_info, with_banner
from memtape.cli.capture_file import refuse_overwrite, write_text
from memtape.cli.command_parser import command_parser, whole_number
from memtape.cli.import_option import add_imports_option


def main(argv: list[str]) -> int:
    p = command_parser("report", __doc__ or "")
    p.add_argument("file", help="a capture file from memtape run")
    p.add_argument(
        "-o", "--output", required=True, metavar="FILE", help="the HTML file to write (required)"
    )
    p.add_argument(
        "--top",
        type=whole_number(0),
        default=50,
        metavar="N",
        help="sites in the table (default: 50)",
    )
    p.add_argument(
        "--force", action="store_true", help="overwrite the output file (default: refuse)"
    )
    ps.add_pid_option(p)
    add_imports_option(p)
    args = p.parse_args(argv)
    refuse_overwrite("report", args.output, args.force)
    pset = ps.open_set("report", args.file, args.pid, imports=args.imports)
    if len(pset.processes) > 1:
        from memtape.cli.process_set_html import set_report

        page = set_report(pset, args.top, args.file)
    else:
        capture = pset.root.capture
        page = with_banner(capture.html_report(args.top), attached_info(capture))
    write_text("report", args.output, page)
    print(f"wrote {args.output}")
    return 0
