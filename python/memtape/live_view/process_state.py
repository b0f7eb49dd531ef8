"""Whether the process writing a capture is still there."""

from __future__ import annotations

import os


def process_running(pid: int) -> bool:
    """True while process ``pid`` exists and has not exited (an exited child that its
    parent has not waited for yet counts as exited)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: there, but not ours to signal
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            # "pid (comm) S ...": the state follows the last ')' (comm may hold one).
            state = stat.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in (b"Z", b"X")
