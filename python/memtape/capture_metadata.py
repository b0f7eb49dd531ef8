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


def platform_name() -> str:
    """``platform.platform()``, without its fork of ``uname -p`` on Linux (12-15 ms of
    every ``memtape run``'s start): there ``uname -p`` says ``unknown`` or the machine,
    both of which ``platform`` leaves out, and the C library is the one ``platform``
    reads too (``CS_GNU_LIBC_VERSION``). Elsewhere, ``platform.platform()`` itself."""
    libc = os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") else None
    uname = os.uname() if hasattr(os, "uname") else None
    parts = (libc or "").split(maxsplit=1)
    if uname is None or uname.sysname != "Linux" or len(parts) != 2:
        return platform.platform()
    name = "-".join(
        x.strip() for x in ("Linux", uname.release, uname.machine, "with", "".join(parts)) if x
    )
    # platform's own clean-up of the joined name
    for char, to in ((" ", "_"), *((c, "-") for c in '/\\:;"()'), ("unknown", "")):
        name = name.replace(char, to)
    while "--" in name:
        name = name.replace("--", "-")
    return name.rstrip("-")


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
        "platform": platform_name(),
        "start_time_ns": time.time_ns(),
        "nframe": nframe,
        "min_size": min_size,
        "native_heap": native_heap,
    }
    return json.dumps(meta | extra)


class MetadataSeries:
    """The metadata of many captures of one kind that differ only in ``argv`` (the pytest
    plugin's capture per test): the fields they share are written to JSON once; each
    capture's (``argv``, ``pid``, ``start_time_ns``) when it starts. No ``rss_at_start``:
    reading the process' memory costs more than a tiny test's whole capture."""

    def __init__(
        self,
        *,
        command: str,
        nframe: int,
        min_size: int,
        native_heap: bool,
        launcher_files: list[str] | None,
    ) -> None:
        shared = json.loads(
            capture_metadata(
                command=command,
                argv=[],
                nframe=nframe,
                min_size=min_size,
                native_heap=native_heap,
                launcher_files=launcher_files,
            )
        )
        for own in ("argv", "pid", "start_time_ns", "rss_at_start"):
            shared.pop(own, None)
        self._head = json.dumps(shared)[:-1]

    def for_argv(self, argv: list[str]) -> str:
        """One capture's metadata, as JSON."""
        argv_json = ", ".join(map(_json_string, argv))
        return (
            f'{self._head}, "argv": [{argv_json}], "pid": {os.getpid()}, '
            f'"start_time_ns": {time.time_ns()}}}'
        )


# A str as a JSON string, as json.dumps writes it (its C encoder, without the call's set-up).
_json_string = json.encoder.encode_basestring_ascii
