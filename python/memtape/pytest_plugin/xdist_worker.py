"""A pytest-xdist worker's own traffic out of the tests' numbers.

A worker's execnet receiver thread reads the controller's messages (more tests to run)
while tests run: pytest-xdist's work, which a test's recording would count as the test's
(a few hundred bytes at a time, enough to fail ``limit_leaks("64 B")`` now and then). The
thread is made memtape's own (its allocations unrecorded, as memtape's own threads are)
from the next message it reads on: execnet reads each one through ``Message.from_io``.
"""

from __future__ import annotations

import sys
from typing import Any

from memtape import _native


def keep_receiver_unrecorded() -> None:
    """Once per worker process; nothing when execnet has no ``Message.from_io``."""
    gateway_base = sys.modules.get("execnet.gateway_base")
    message = getattr(gateway_base, "Message", None)
    from_io = getattr(message, "from_io", None)
    if message is None or from_io is None or getattr(from_io, "_memtape_own_work", False):
        return

    def from_io_as_own_work(io: Any) -> Any:
        _native._own_work_begin()  # for good: this thread only ever reads messages
        return from_io(io)

    from_io_as_own_work._memtape_own_work = True  # type: ignore[attr-defined]
    message.from_io = staticmethod(from_io_as_own_work)
