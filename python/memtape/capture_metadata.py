"""The JSON metadata a capture file's header carries: which tool wrote it, what ran
(command, argv, pid, Python, platform, start time) and with which settings. ``memtape
run``, followed child processes, ``%%memtape`` cells and the pytest plugin each add the
fields of their own kind of recording."""

from __future__ import annotations

import json
import os
import platform
import time

from memtape import __version__, _native


def capture_metadata(
    *,
    command: str,
    argv: list[str],
    nframe: int,
    min_size: int,
    native_heap: bool,
    launcher_files: list[str] | None,
    **extra: object,
) -> str:
    """The metadata as JSON. ``launcher_files``: files whose frames sit below the
    program's own in every stack and that reports leave out (None: none named);
    ``extra``: fields of one kind of recording, written after the common ones."""
    meta: dict[str, object] = {} if launcher_files is None else {"launcher_files": launcher_files}
    # The process' memory before the recorded code runs: the interpreter's start-up and
    # memtape (and, for a notebook cell, the kernel), which reports tell apart from what
    # the program adds.
    reading = _native._process_memory()
    if reading is not None:
        meta["rss_at_start"] = json.loads(reading)
    meta |= {
        "tool": "memtape",
        "tool_version": __version__,
        "pid": os.getpid(),
        "argv": argv,
        "command": command,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "start_time_ns": time.time_ns(),
        "nframe": nframe,
        "min_size": min_size,
        "native_heap": native_heap,
    }
    return json.dumps(meta | extra)
