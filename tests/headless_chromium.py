"""Loading a page in headless Chromium and reading what happened, over the DevTools protocol.

``HeadlessChromium`` starts Debian's ``chromium`` with ``--remote-debugging-pipe`` (the
protocol runs over file descriptors 3 and 4 as NUL-terminated JSON, so no WebSocket
library is needed) and with every host name resolving to nothing, so a page that tries
the network fails instead of reaching it. ``load(path, script)`` opens a local file in a
fresh tab, waits for its load event, evaluates ``script`` in the page (its value comes
back as JSON) and returns a ``PageVisit``: that value plus every console error, uncaught
exception (syntax errors included), log error, JavaScript dialog and network request
the page made.

When Chromium is missing or cannot start, ``ChromiumUnavailable`` says why; the tests
that use it fail with that message (they never skip).
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
START_TIMEOUT_S = 60.0
COMMAND_TIMEOUT_S = 30.0
# Let timers and late scripts run after the load event before reading the DOM.
SETTLE_S = 0.3


class ChromiumUnavailable(RuntimeError):
    """Headless Chromium is not installed or does not start here."""


@dataclass
class PageVisit:
    """What one page load produced."""

    url: str
    value: Any = None
    console_errors: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    log_errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        """Everything that a clean, offline, script-error-free page must not produce."""
        foreign = [url for url in self.requests if url != self.url and not url.startswith("data:")]
        return [
            *(f"console error: {m}" for m in self.console_errors),
            *(f"uncaught exception: {m}" for m in self.exceptions),
            *(f"log error: {m}" for m in self.log_errors),
            *(f"javascript dialog: {m}" for m in self.dialogs),
            *(f"network request: {u}" for u in foreign),
            *(f"failed request: {u}" for u in self.failed_requests),
        ]


def find_chromium() -> str:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    raise ChromiumUnavailable(
        "no chromium on PATH; install it with: apt-get update && apt-get install -y chromium"
    )


class HeadlessChromium:
    """One headless Chromium process driven over ``--remote-debugging-pipe``."""

    def __init__(self) -> None:
        self.binary = find_chromium()
        self.profile = tempfile.mkdtemp(prefix="memtape-chromium-")
        self.log_path = Path(self.profile) / "chromium.log"
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []
        argv = [
            self.binary,
            "--headless",
            "--no-sandbox",  # the tests may run as root, where the sandbox refuses to start
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--user-data-dir={self.profile}",
            "--remote-debugging-pipe",
            "about:blank",
        ]
        # Chromium reads commands from fd 3 and writes replies to fd 4.
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                close_fds=False,  # fds 3 and 4 are set up by _dup_to
                preexec_fn=_dup_to(to_browser_r, from_browser_w),
                start_new_session=True,
            )
        os.close(to_browser_r)
        os.close(from_browser_w)
        try:
            self.send("Browser.getVersion", timeout=START_TIMEOUT_S)
        except ChromiumUnavailable:
            self.close()
            raise

    # --- the protocol -------------------------------------------------------------------

    def send(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        session: str | None = None,
        timeout: float = COMMAND_TIMEOUT_S,
    ) -> dict[str, Any]:
        """Sends one command and returns its result (events that arrive meanwhile are kept)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        data = json.dumps(message).encode() + b"\0"
        try:
            while data:
                data = data[os.write(self._to_browser, data) :]
        except OSError as exc:
            raise ChromiumUnavailable(
                f"chromium closed its pipe: {exc}\n{self.log_tail()}"
            ) from exc
        deadline = time.monotonic() + timeout
        while True:
            reply = self._expect(deadline, f"a reply to {method}")
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method} failed: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self._events.append(reply)

    def _receive(self, deadline: float) -> dict[str, Any] | None:
        """The next message, or None if none came before ``deadline``."""
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise ChromiumUnavailable(
                    f"chromium exited (status {self.process.poll()})\n{self.log_tail()}"
                )
            self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        message: dict[str, Any] = json.loads(raw)
        return message

    def _expect(self, deadline: float, waiting_for: str) -> dict[str, Any]:
        message = self._receive(deadline)
        if message is None:
            raise ChromiumUnavailable(f"no {waiting_for} from chromium\n{self.log_tail()}")
        return message

    def _events_until(self, deadline: float) -> None:
        """Keeps the events that arrive until ``deadline``."""
        while (message := self._receive(deadline)) is not None:
            self._events.append(message)

    # --- pages --------------------------------------------------------------------------

    def load(
        self, path: str | os.PathLike[str], script: str, width: int | None = None
    ) -> PageVisit:
        """Opens ``path`` in a new tab (``width`` CSS pixels wide, else Chromium's default
        window); returns ``script``'s value and what the page did."""
        url = Path(path).resolve().as_uri()
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        try:
            for domain in ("Page", "Runtime", "Log", "Network"):
                self.send(f"{domain}.enable", session=session)
            if width is not None:
                metrics = {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False}
                self.send("Emulation.setDeviceMetricsOverride", metrics, session=session)
            self._events.clear()
            self.send("Page.navigate", {"url": url}, session=session)
            deadline = time.monotonic() + COMMAND_TIMEOUT_S
            while not any(
                e.get("method") == "Page.loadEventFired" and e.get("sessionId") == session
                for e in self._events
            ):
                self._events.append(self._expect(deadline, f"the load event of {url}"))
                self._answer_dialogs(session)
            self._events_until(time.monotonic() + SETTLE_S)
            self._answer_dialogs(session)
            evaluated = self.send(
                "Runtime.evaluate",
                {"expression": script, "returnByValue": True, "awaitPromise": True},
                session=session,
            )
            self._events_until(time.monotonic() + 0.05)
            visit = self._visit(url, session)
            if "exceptionDetails" in evaluated:
                raise AssertionError(f"the test's own script failed: {evaluated}")
            visit.value = evaluated["result"].get("value")
            return visit
        finally:
            self.send("Target.closeTarget", {"targetId": target})

    def _answer_dialogs(self, session: str) -> None:
        # A dialog left open would block the page; accept it (it is reported anyway).
        for event in self._events:
            if event.get("method") == "Page.javascriptDialogOpening" and not event.get("answered"):
                event["answered"] = True
                self.send("Page.handleJavaScriptDialog", {"accept": True}, session=session)

    def _visit(self, url: str, session: str) -> PageVisit:
        visit = PageVisit(url)
        for event in self._events:
            if event.get("sessionId") != session:
                continue
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                visit.console_errors.append(_console_text(params))
            elif method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                description = details.get("exception", {}).get("description", "")
                visit.exceptions.append(f"{details.get('text', '')} {description}".strip())
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                entry = params["entry"]
                visit.log_errors.append(f"{entry.get('text')} ({entry.get('url', '')})")
            elif method == "Page.javascriptDialogOpening":
                visit.dialogs.append(f"{params.get('type')}: {params.get('message')}")
            elif method == "Network.requestWillBeSent":
                visit.requests.append(params.get("request", {}).get("url", ""))
            elif method == "Network.loadingFailed":
                visit.failed_requests.append(
                    f"{params.get('requestId')}: {params.get('errorText')}"
                )
        return visit

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.send("Browser.close", timeout=5)
            except (ChromiumUnavailable, RuntimeError, OSError):
                pass
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait()
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)


def _console_text(params: dict[str, Any]) -> str:
    parts = []
    for arg in params.get("args", []):
        parts.append(str(arg.get("value", arg.get("description", ""))))
    return " ".join(parts)


def _dup_to(read_fd: int, write_fd: int) -> Any:
    """In the child: ``read_fd`` becomes fd 3 and ``write_fd`` fd 4 (via high copies, so
    that neither overwrites the other when one of them already is 3 or 4)."""

    def setup() -> None:
        high_read = fcntl.fcntl(read_fd, fcntl.F_DUPFD, 10)
        high_write = fcntl.fcntl(write_fd, fcntl.F_DUPFD, 10)
        os.dup2(high_read, 3)
        os.dup2(high_write, 4)

    return setup
