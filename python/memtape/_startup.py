"""Starts tracing at interpreter start-up when ``MEMTAPE_TRACEMALLOC=N`` is set.

The installed ``memtape_startup.pth`` imports this module from ``site`` when the variable
is set (and does nothing else otherwise), before any user code runs. It mirrors
``PYTHONTRACEMALLOC``: a positive number of frames starts tracing, 0 or unset does
nothing, and ``-E``/``-I`` (ignore environment) disable it. A bad value never stops the
user's program: it is reported on stderr and ignored.

memtape then is the process's tracer (:mod:`memtape._process_tracer`): the standard
library's ``tracemalloc``, and so ``warnings``, pytest and every other caller, answers
with memtape's traces. Children inherit the variable as they inherit ``PYTHONTRACEMALLOC``.
"""

from __future__ import annotations

import os
import sys

from memtape._process_tracer import ENV_VAR


def requested_nframe(environ: dict[str, str] | os._Environ[str] = os.environ) -> int | None:
    """The frame limit the environment asks for, or None."""
    if sys.flags.ignore_environment:
        return None
    value = environ.get(ENV_VAR, "").strip()
    if not value:
        return None
    try:
        nframe = int(value)
    except ValueError:
        print(
            f"memtape: ignoring {ENV_VAR}={value!r}: expected a number of frames "
            "between 1 and 65535",
            file=sys.stderr,
        )
        return None
    if nframe <= 0:
        return None
    if nframe > 65535:
        print(
            f"memtape: ignoring {ENV_VAR}={value!r}: the number of frames must be "
            "in range [1; 65535]",
            file=sys.stderr,
        )
        return None
    return nframe


def activate() -> None:
    """Starts tracing if the environment asks for it."""
    nframe = requested_nframe()
    if nframe is None:
        return
    from memtape import tracemalloc

    tracemalloc.start(nframe)
    tracemalloc.install()


activate()
