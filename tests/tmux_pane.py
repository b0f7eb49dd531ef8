"""A detached tmux session driven as a user would: ``send-keys`` presses keys,
``capture-pane`` reads the screen (the live view's tests, ``memtape attach --live``'s)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from memtape_cli import PACKAGE_DIR

#: How long the view may take to show what the test waits for ("within a few seconds":
#: memtape's start, the capture's first block, a refresh; on a busy machine).
SHOW_S = 15.0


class Pane:
    """A detached tmux session of its own (a private server socket), running one
    command in ``directory``; the pane ends with ``EXIT=<status>`` when it returns."""

    def __init__(self, directory: Path, args: list[str], *, width: int, height: int) -> None:
        self.socket = f"memtape-live-test-{uuid.uuid4().hex[:12]}"
        command = shlex.join([sys.executable, "-m", "memtape", *args])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(PACKAGE_DIR.parent), *filter(None, [env.get("PYTHONPATH")])]
        )
        env["LANG"] = "C.UTF-8"
        # A stale size exported by a shell: the view must draw for the pane's own size.
        env["COLUMNS"], env["LINES"] = "80", "24"
        env.pop("TMUX", None)
        self._tmux(
            "new-session",
            "-d",
            "-s",
            "view",
            "-x",
            str(width),
            "-y",
            str(height),
            f"cd {shlex.quote(str(directory))} && {command}; echo EXIT=$?; sleep 600",
            env=env,
        )

    def _tmux(self, *args: str, env: dict[str, str] | None = None) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, "-f", "/dev/null", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
            check=True,
        )
        return done.stdout

    def text(self) -> str:
        """The screen now (wrapped lines joined)."""
        return self._tmux("capture-pane", "-p", "-J", "-t", "view")

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", "view", *keys)

    def wait_for(self, ready: Callable[[str], bool], what: str, timeout: float = SHOW_S) -> str:
        """The screen once ``ready`` holds for it; fails naming ``what`` and showing the
        screen after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.text()
            if ready(text):
                return text
            if time.monotonic() > deadline:
                pytest.fail(f"after {timeout} s the pane shows no {what}:\n{text}")
            time.sleep(0.2)

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=30)
