"""The process that analyzes ``memtape run``'s capture while the program runs.

The end-of-run summary needs the capture analyzed: its live blocks replayed, tens of MiB
of tables for a program with millions of small objects. Made in the traced process, that
memory would be added to the program's at its peak, where a memory profiler must add as
little as it can. So a helper process of memtape's own makes it: ``memtape run`` starts
it before the capture (:func:`start_follower`), and it follows the file as the capture
writes it (``_native.CaptureFollower``, whose docs describe how the two talk), then
sends back the summary's fields (:class:`memtape.cli.summary.RunSummary`) as JSON.

It runs the same interpreter, isolated (``-I -S``: no site, no environment, no current
directory on the path), with this package's directory put on its path: it imports
nothing but memtape and the standard library, and none of the program's start-up hooks.
"""

from __future__ import annotations

import contextlib
import os
import sys

import memtape
from memtape import _native

#: How many sites the summary lists.
SUMMARY_TOP = 5

#: The helper's standard output: the socket connected to ``memtape run``.
RUN_SOCKET = 1

#: What the helper runs (``sys.argv[1:]``: this package's parent directory, the
#: ``--imports`` mode, how many top sites, and the traced process' id, which ``ps`` shows).
HELPER_CODE = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from memtape.cli.summary_process import main; raise SystemExit(main(sys.argv[2:]))"
)


def start_follower(imports: str, top: int = SUMMARY_TOP) -> _native.CaptureFollower | None:
    """Starts the summary process (``None`` when it cannot start: the summary is then
    made here, from the finished file)."""
    if not sys.executable:
        return None
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(memtape.__file__)))
    command = [sys.executable, "-I", "-S", "-c", HELPER_CODE, package_parent, imports]
    command += [str(top), f"memtape-run-summary-of-{os.getpid()}"]
    try:
        return _native.CaptureFollower(command)
    except OSError:
        return None


def _peak_rss() -> int:
    """This process' peak RSS in bytes (``VmHWM``), 0 where unknown."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    return 0


def _answer(capture: _native.Capture, top: int) -> str:
    import json

    from memtape.cli.summary import RunSummary

    fields = RunSummary.of(capture, top)._asdict()
    # Not printed: for benchmarks, what the summary costs in this process.
    fields["summary_process_peak_rss"] = _peak_rss()
    return json.dumps(fields)


def main(argv: list[str]) -> int:
    """The helper: ``IMPORTS TOP TAG``; answers on :data:`RUN_SOCKET`."""
    imports, top = argv[0], int(argv[1])
    try:
        capture = _native._analyze_followed_capture(RUN_SOCKET, imports)
        if capture is None:
            return 0
        answer = _answer(capture, top)
    except Exception as exc:  # noqa: BLE001 - any failure is answered: memtape run then reads the file itself
        import json

        answer = json.dumps({"error": f"{type(exc).__name__}: {exc}"})
    data = answer.encode()
    with contextlib.suppress(OSError):  # memtape run has gone: nobody reads it
        while data:
            data = data[os.write(RUN_SOCKET, data) :]
    return 0
