"""A second Ctrl-C while ``memtape run`` prints its end-of-run summary (issue 34, item 8).

The first SIGINT ends the program (KeyboardInterrupt); the capture is then complete and
the summary starts. A second SIGINT during the summary must skip it in one line, still
print the commands that read the capture, and end the process as the first Ctrl-C
would have (by SIGINT, as python ends after an uncaught KeyboardInterrupt).

To land the second SIGINT inside the summary every time, the test holds the summary
there: memtape's stderr is a pipe of one page that the test stops reading as soon as the
summary's first line ("memtape: recorded ...") has arrived, and the summary has more
than a page left to print (the capture's path, printed in every hint, is 3,000
characters long). The summary cannot end before the test reads again, which it does only
after sending the signal.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
from pathlib import Path

from child_python import child_env
from memtape_cli import read_json, write_program
from test_cli_exit_paths import wait_until_asleep

PROGRAM = """
import time
keep = [bytearray(100) for _ in range(20_000)]
print("ready", flush=True)
time.sleep(60)
"""


def read_line(fd: int, timeout_marker: str) -> str:
    """One line from ``fd``, read a byte at a time (nothing past it leaves the pipe)."""
    data = bytearray()
    while not data.endswith(b"\n"):
        byte = os.read(fd, 1)
        assert byte, f"stderr ended before {timeout_marker!r}: {data.decode(errors='replace')}"
        data += byte
    return data.decode()


def test_second_ctrl_c_during_the_summary(tmp_path: Path) -> None:
    script = write_program(tmp_path / "waits.py", PROGRAM)
    deep = Path(*(["d" * 200] * 15))
    (tmp_path / deep).mkdir(parents=True)
    shown = str(deep / "waits.mtape")  # relative to the run's directory, as given
    assert len(shown) > 3000
    cmd = [sys.executable, "-m", "memtape", "run", "-o", shown, str(script)]
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env(),
        start_new_session=True,
        # Ctrl-C's default, as in a terminal: a shell running the suite in the background
        # hands its children SIGINT ignored, and python then installs no handler for it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        err = proc.stderr.fileno()
        fcntl.fcntl(err, fcntl.F_SETPIPE_SZ, 4096)  # one page: the summary overflows it
        assert proc.stdout.readline() == b"ready\n"
        wait_until_asleep(proc.pid)
        proc.send_signal(signal.SIGINT)  # ends the program
        before: list[str] = []
        while not (line := read_line(err, "memtape: recorded")).startswith("memtape: recorded"):
            before.append(line)
        assert before[-2:] == ["KeyboardInterrupt\n", "\n"], before
        proc.send_signal(signal.SIGINT)  # during the summary
        rest = proc.stderr.read().decode()
        status = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert "Traceback" not in rest, rest
    skipped = f"memtape: summary skipped; the capture is complete: {shown}\n"
    assert skipped in rest, rest[-2000:]
    hints = rest[rest.index(skipped) + len(skipped) :]
    assert hints == (
        "read it with:\n"
        f"  memtape stats {shown}\n"
        f"  memtape top {shown}\n"
        f"  memtape flamegraph {shown} -o flamegraph.html\n"
        f"  memtape report {shown} -o report.html\n"
    ), hints[-2000:]
    # As after the first Ctrl-C alone: python dies by SIGINT after a KeyboardInterrupt.
    assert status == -signal.SIGINT
    stats = read_json("stats", tmp_path / shown)
    assert stats["run"]["cut_short"] is False
    assert (stats["run"]["exit"], stats["run"]["exit_code"]) == ("signal", 130)
    assert stats["totals"]["allocs"] >= 20_000
