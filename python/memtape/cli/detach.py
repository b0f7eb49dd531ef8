"""Stop the recording 'memtape attach PID' started in a running process: the capture
file is finished (its trailer says it was detached), and memtape's hooks and thread
leave the process, which goes on running as before."""

from __future__ import annotations

import sys

from memtape.attach.control import stop_recording
from memtape.attach.target_process import AttachError
from memtape.cli.attach import print_ended
from memtape.cli.command_parser import command_parser


def main(argv: list[str]) -> int:
    p = command_parser("detach", __doc__ or "")
    p.add_argument("pid", type=int, help="the process memtape attach records")
    args = p.parse_args(argv)
    try:
        ending = stop_recording(args.pid)
    except AttachError as refusal:
        print(f"memtape detach: {refusal}", file=sys.stderr)
        return 2
    print_ended(ending.exit, ending.events, ending.output or "?")
    return 0
