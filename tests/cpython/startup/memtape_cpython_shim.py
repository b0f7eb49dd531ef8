"""Startup shim: substitutes a replacement for the builtin ``_tracemalloc``.

The conformance runner writes a ``.pth`` file into a throwaway venv whose only
job is to call :func:`install` while ``site`` is imported, i.e. before any user
code (and before anything can import :mod:`tracemalloc`). ``.pth`` files are
processed even under ``-I`` and ``-E``, so the child interpreters the CPython
tests spawn get the same substitution as the test process itself.

:func:`install` then:

1. adds the site directories of the interpreter under test (for example the
   ``.venv-3.11`` that ``scripts/venv.sh`` made, where memtape is installed in
   editable mode) with :func:`site.addsitedir`, so their own ``.pth`` files run;
2. stops the builtin tracer if the core already started it (``-X tracemalloc``
   and ``PYTHONTRACEMALLOC`` start it before ``site`` is imported);
3. imports the replacement backend and puts it in ``sys.modules['_tracemalloc']``;
4. emulates startup tracing: it parses ``-X tracemalloc[=N]`` and
   ``PYTHONTRACEMALLOC=N`` exactly as CPython's ``config_init_tracemalloc()``
   does and starts the replacement with that many frames.

Any failure is fatal (exit status 1 with a message on stderr): a ``.pth`` line
that raises is otherwise only reported by ``site``, which would leave the
builtin ``_tracemalloc`` in place and make the tests silently test CPython.
"""

from __future__ import annotations

import os
import site
import sys
import traceback
from types import ModuleType

#: backend name -> module that provides the 10 names of ``_tracemalloc``
BACKEND_MODULES: dict[str, str] = {
    "memtape": "memtape._tracemalloc",
    "proxy": "tracemalloc_proxy",
}

#: the range ``_tracemalloc.start()`` accepts (``MAX_NFRAME`` in CPython)
MAX_NFRAME = 65535

_installed_backend: str | None = None


class StartupConfigError(Exception):
    """An invalid ``-X tracemalloc`` or ``PYTHONTRACEMALLOC`` value."""


def installed_backend() -> str | None:
    """The backend name :func:`install` substituted, or None."""
    return _installed_backend


def install(backend: str, site_dirs: list[str]) -> None:
    """Substitute *backend* for ``_tracemalloc``; exits the process on failure.

    Idempotent: ``site`` processes a venv's site-packages twice (once from
    ``site.venv()``, once from ``site.main()``), so the ``.pth`` line runs twice.
    """
    global _installed_backend
    if _installed_backend is not None:
        return
    try:
        for directory in site_dirs:
            site.addsitedir(directory)
        stop_builtin_tracer()
        nframe = startup_nframe()
        replacement = import_backend(backend)
        sys.modules["_tracemalloc"] = replacement
        _installed_backend = backend
    except StartupConfigError as exc:
        die(f"Fatal Python error: config_init_tracemalloc: {exc}\n")
        return
    except BaseException:  # any failure must end the process: see the module doc
        die(
            f"memtape conformance shim: cannot substitute the {backend!r} backend "
            f"for _tracemalloc:\n{traceback.format_exc()}"
        )
        return
    if nframe:
        start_at_startup(replacement, nframe)


def stop_builtin_tracer() -> None:
    """Stop CPython's own tracer if ``-X tracemalloc``/``PYTHONTRACEMALLOC`` started it."""
    if "tracemalloc" in sys.modules:
        raise RuntimeError("tracemalloc was imported before the shim ran")
    import _tracemalloc as builtin

    if builtin.__spec__ is None or builtin.__spec__.origin != "built-in":
        raise RuntimeError(f"_tracemalloc is already substituted: {builtin!r}")
    if builtin.is_tracing():
        builtin.stop()


def import_backend(backend: str) -> ModuleType:
    """Import the module that implements *backend*."""
    import importlib

    try:
        module_name = BACKEND_MODULES[backend]
    except KeyError:
        known = sorted(BACKEND_MODULES)
        raise ValueError(f"unknown backend {backend!r}; expected one of {known}") from None
    return importlib.import_module(module_name)


def startup_nframe() -> int:
    """The frame count startup tracing asks for (0: off), as CPython computes it.

    ``PYTHONTRACEMALLOC`` is read unless ``-E``/``-I`` is in effect and is ignored
    when empty; ``-X tracemalloc`` overrides it, and means 1 without ``=N``.
    Negative or non-integer values are configuration errors.
    """
    nframe = 0
    env = os.environ.get("PYTHONTRACEMALLOC", "")
    if env and not sys.flags.ignore_environment:
        nframe = parse_nframe(env, "PYTHONTRACEMALLOC: invalid number of frames")
    xoption = sys._xoptions.get("tracemalloc")
    if xoption is True:
        nframe = 1
    elif isinstance(xoption, str):
        nframe = parse_nframe(xoption, "-X tracemalloc=NFRAME: invalid number of frames")
    return nframe


def parse_nframe(text: str, error: str) -> int:
    """Parse like C ``strtol(text, &end, 10)`` requiring ``*end == '\\0'``, a C int, >= 0."""
    body = text.lstrip(" \t\n\v\f\r")
    sign = 1
    if body[:1] in ("+", "-"):
        sign = -1 if body[0] == "-" else 1
        body = body[1:]
    if not body.isascii() or not body.isdigit():
        # strtol converts nothing: the end pointer stays at the start of text
        if text == "":
            return 0
        raise StartupConfigError(error)
    value = sign * int(body)
    if not -(2**31) <= value < 2**31 or value < 0:
        raise StartupConfigError(error)
    return value


def start_at_startup(replacement: ModuleType, nframe: int) -> None:
    """Start tracing as the core would at init; a rejected count is fatal, as there."""
    try:
        replacement.start(nframe)
    except ValueError as exc:
        die(f"Fatal Python error: init_interp_main: can't start tracemalloc\nValueError: {exc}\n")
    except BaseException:  # as in install()
        die(f"memtape conformance shim: start({nframe}) failed:\n{traceback.format_exc()}")


def die(message: str) -> None:
    """Report a startup failure and end the interpreter with status 1."""
    sys.stderr.write(message)
    sys.stderr.flush()
    os._exit(1)
