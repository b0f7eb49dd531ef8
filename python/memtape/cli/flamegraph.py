"""Memory live at the peak as a flame graph in one HTML page: what was allocated, and
still held, when memory use was highest; --leaks shows memory never freed instead.

For a --follow-children capture: every process under one root (at the combined peak, or
never freed); --pid shows one."""

from __future__ import annotations

from memtape.cli import process_set as ps
from memtape.cli.capture_file import refuse_overwrite, write_text
from memtape.cli.command_parser import command_parser
from memtape.cli.import_option import add_imports_option


def main(argv: list[str]) -> int:
    p = command_parser("flamegraph", __doc__ or "")
    p.add_argument("file", help="a capture file from memtape run")
    p.add_argument(
        "-o", "--output", required=True, metavar="FILE", help="the HTML file to write (required)"
    )
    p.add_argument(
        "--leaks",
        action="store_true",
        help="memory never freed, live at the end (default: live at the peak)",
    )
    p.add_argument(
        "--folded",
        action="store_true",
        help="write folded stacks ('a;b;c BYTES' lines) instead of HTML",
    )
    p.add_argument(
        "--force", action="store_true", help="overwrite the output file (default: refuse)"
    )
    ps.add_pid_option(p)
    add_imports_option(p)
    args = p.parse_args(argv)
    refuse_overwrite("flamegraph", args.output, args.force)
    pset = ps.open_set("flamegraph", args.file, args.pid, imports=args.imports)
    at = "end" if args.leaks else "peak"
    if len(pset.processes) > 1:
        from memtape.cli import process_set_flame

        if args.folded:
            write_text("flamegraph", args.output, process_set_flame.combined_folded(pset, at))
        else:
            what = "never freed" if args.leaks else "live at the combined peak"
            title = f"memtape: memory {what}, {len(pset.processes)} processes"
            page = process_set_flame.combined_page(pset, at, title, args.file)
            write_text("flamegraph", args.output, page)
        print(f"wrote {args.output}")
        return 0
    capture = pset.root.capture
    if args.folded:
        write_text("flamegraph", args.output, capture.folded(at))
        return 0
    what = "never freed" if args.leaks else "live at the peak"
    title = f"memtape: memory {what}"
    split = capture.by_source_text(at)
    subtitle = args.file if split is None else f"{args.file} ({split})"
    write_text("flamegraph", args.output, capture.flamegraph_html(at, title, subtitle))
    print(f"wrote {args.output}")
    return 0
