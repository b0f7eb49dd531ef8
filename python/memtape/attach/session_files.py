"""The files through which ``memtape attach``, the payload it runs inside the target
and ``memtape detach`` talk: one directory per attached process,
``/tmp/memtape-attach.PID.START`` (START: the process' start time, so that a later
process reusing the pid is not taken for it), owned by the target's user.

- ``request.json``: what to record, written by attach before the payload runs;
- ``decision``: created exclusively, by the payload as it starts recording
  (``started``) or by attach when it gave up waiting (``cancelled``): whichever comes
  first wins, so a payload that runs late never starts a capture nobody waits for;
- ``result.json``: the payload's answer (recording, or the error that stopped it);
- ``control``: a FIFO the payload's thread waits on; detach writes ``stop`` into it;
- ``ended.json``: written by the payload's thread once the capture is complete (how it
  ended), after which memtape has nothing left in the target."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Not $TMPDIR: the target and memtape must find the same directory, whatever their
# environments say; the directory is made with mode 0700 and owned by the target's user.
ROOT = "/tmp"  # noqa: S108
PREFIX = "memtape-attach."


@dataclass(frozen=True)
class SessionFiles:
    """The directory of one attach session and the files in it."""

    directory: str

    @classmethod
    def of(cls, pid: int, start_ticks: int) -> SessionFiles:
        return cls(os.path.join(ROOT, f"{PREFIX}{pid}.{start_ticks}"))

    @property
    def request(self) -> str:
        return os.path.join(self.directory, "request.json")

    @property
    def decision(self) -> str:
        return os.path.join(self.directory, "decision")

    @property
    def result(self) -> str:
        return os.path.join(self.directory, "result.json")

    @property
    def control(self) -> str:
        return os.path.join(self.directory, "control")

    @property
    def ended(self) -> str:
        return os.path.join(self.directory, "ended.json")

    @property
    def script(self) -> str:
        """The script the target runs (PEP 768 runs a file)."""
        return os.path.join(self.directory, "payload.py")

    def decide(self, decision: str) -> bool:
        """Records ``decision`` unless one was recorded already; whether it was ours."""
        try:
            fd = os.open(self.decision, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(decision)
        return True

    def decided(self) -> str | None:
        try:
            with open(self.decision, encoding="utf-8") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def remove(self) -> None:
        """Removes the directory and what is in it (nothing if it is gone)."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return
        for name in names:
            try:
                os.remove(os.path.join(self.directory, name))
            except FileNotFoundError:
                pass
        try:
            os.rmdir(self.directory)
        except FileNotFoundError:
            pass


def write_json(path: str, data: dict[str, Any]) -> None:
    """Writes ``data`` so that a reader sees the whole file or none (renamed into place)."""
    partial = f"{path}.partial"
    with open(partial, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(partial, path)


def read_json(path: str) -> dict[str, Any] | None:
    """The JSON in ``path``, or None while it is not there."""
    try:
        with open(path, encoding="utf-8") as f:
            data: dict[str, Any] = json.load(f)
    except FileNotFoundError:
        return None
    return data


def sessions_of(pid: int) -> list[SessionFiles]:
    """Every session directory left for ``pid`` (any start time)."""
    try:
        names = os.listdir(ROOT)
    except OSError:
        return []
    return [
        SessionFiles(os.path.join(ROOT, name))
        for name in names
        if name.startswith(f"{PREFIX}{pid}.")
    ]


def wait_for(
    path: str, timeout_s: float, still_waiting: Callable[[], bool]
) -> dict[str, Any] | None:
    """The JSON in ``path`` once it appears, or None after ``timeout_s`` or as soon as
    ``still_waiting()`` says false (the target exited)."""
    deadline = time.monotonic() + timeout_s
    while True:
        data = read_json(path)
        if data is not None:
            return data
        if time.monotonic() >= deadline or not still_waiting():
            return read_json(path)
        time.sleep(0.02)
