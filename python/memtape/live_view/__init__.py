"""The live view: a capture that another process is writing, followed in the terminal
and drawn again about once a second (``memtape live FILE``, ``memtape run --live``).

:func:`show_live_view` takes the capture file and the writing process' pid; check
:func:`terminal_problem` before it."""

from __future__ import annotations

from memtape.live_view.terminal import show_live_view, terminal_problem

__all__ = ["show_live_view", "terminal_problem"]
