"""The test function's own call, and nothing around it, as what a recording counts.

While a test is measured its thread does memtape's own work (unrecorded), and only the
call of the test function runs as the program
(``_native._call_as_program_with_floor``): pytest's, pluggy's and memtape's work before
and after the call, and that of other plugins' hook wrappers, stays out of the numbers.
So does pytest's work that the test's call sets off: the hooks called meanwhile (a
subtest's report) and unittest's calls of its result object (pytest's test item). The
fixtures' setup is pytest's work too here, as in pytest-memray: the test is charged for
what its own body does.

The call's stacks end at the frame that makes it (the floor): the 40 or so runner frames
outside it, which the report leaves out (``runner_files``), are not walked and compared
at every allocation of the test.
"""

from __future__ import annotations

import functools
import inspect
import keyword
import os
import sys
import threading
import unittest
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import _pytest
import pluggy
import pytest

from memtape import _native

_OWN_FILE = os.path.abspath(__file__)

# (positional count, keyword names) -> its trampoline, compiled once
_trampolines: dict[tuple[int, tuple[str, ...]], Callable[..., Any]] = {}


def _trampoline(positional: int, names: tuple[str, ...]) -> Callable[..., Any] | None:
    """``call(function, p0, .., k0, .., /)`` calling ``function(p0, .., a=k0, ..)``: the
    keyword names are a constant of its code, so the call allocates nothing, where
    ``function(**kwargs)`` builds an argument array and a names tuple inside the recording.
    None when a name cannot be written as a keyword (pytest passes parameter names)."""
    key = (positional, names)
    found = _trampolines.get(key)
    if found is None:
        if not all(n.isidentifier() and not keyword.iskeyword(n) for n in names):
            return None
        params = [f"_p{i}" for i in range(positional)] + [f"_k{i}" for i in range(len(names))]
        passed = params[:positional] + [
            f"{n}={v}" for n, v in zip(names, params[positional:], strict=True)
        ]
        source = (
            f"def call(function, {''.join(p + ', ' for p in params)}/):\n"
            f"    return function({', '.join(passed)})\n"
        )
        namespace: dict[str, Any] = {}
        # The trampoline's frame is memtape's (this file's), left out of the stacks shown;
        # its source holds nothing but the identifiers checked above.
        exec(compile(source, _OWN_FILE, "exec"), namespace)  # noqa: S102
        found = _trampolines[key] = namespace["call"]
    return found


def _call_recorded(
    function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``function(*args, **kwargs)``, with the thread recorded during that call only."""
    trampoline = _trampoline(len(args), tuple(kwargs))
    if trampoline is None:
        return _native._call_as_program_with_floor(functools.partial(function, *args, **kwargs))
    return _native._call_as_program_with_floor(trampoline, function, *args, *kwargs.values())


def _recorded(function: Callable[..., Any], program_mode: int) -> Callable[..., Any]:
    """``function`` wrapped so that only its call is recorded. A coroutine function is
    recorded while it is awaited, the event loop's steps between its own included (the
    thread's mode cannot follow a coroutine across an event loop)."""
    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def call_async(*args: Any, **kwargs: Any) -> Any:
            own = _native._own_work_begin()
            _native._work_end(program_mode)
            try:
                return await function(*args, **kwargs)
            finally:
                _native._work_end(own)

        return call_async

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        return _call_recorded(function, args, kwargs)

    return call


# What unittest calls on its result object, which pytest's item for a TestCase is.
_UNITTEST_RESULT = (
    "startTest",
    "stopTest",
    "addSubTest",
    "addSuccess",
    "addError",
    "addFailure",
    "addSkip",
    "addExpectedFailure",
    "addUnexpectedSuccess",
    "addDuration",
)


def _as_own_work(function: Callable[..., Any]) -> Callable[..., Any]:
    def own_work(*args: Any, **kwargs: Any) -> Any:
        token = _native._own_work_begin()
        try:
            return function(*args, **kwargs)
        finally:
            _native._work_end(token)

    return own_work


class _HooksAsOwnWork:
    """Every pytest hook called meanwhile, from any thread, runs as memtape's own work."""

    def __init__(self) -> None:
        self.tokens = threading.local()

    def before(self, *_: object) -> None:
        token = _native._own_work_begin()
        stack = getattr(self.tokens, "stack", None)
        if stack is None:
            stack = self.tokens.stack = []
        stack.append(token)

    def after(self, *_: object) -> None:
        _native._work_end(self.tokens.stack.pop())


@contextmanager
def test_call_recorded(item: pytest.Item) -> Iterator[None]:
    """For the duration of the call phase, the calling thread's work is memtape's own
    except the call of the item's test function (``item.obj``, which pytest and unittest
    call), or of ``item.runtest`` for items with no test function (doctests, other
    plugins' items); hooks and unittest's result calls stay memtape's own even then."""
    own = _native._own_work_begin()
    hooks = _HooksAsOwnWork()
    undo_hooks = item.config.pluginmanager.add_hookcall_monitoring(hooks.before, hooks.after)
    replaced: list[str] = []
    try:
        if isinstance(item, pytest.Function):
            for name in _UNITTEST_RESULT if hasattr(item, "addSubTest") else ():
                method = getattr(item, name, None)
                if callable(method):
                    setattr(item, name, _as_own_work(method))
                    replaced.append(name)
            original = item.obj
            item.obj = _recorded(original, own)
            try:
                yield
            finally:
                item.obj = original
        else:
            runtest = item.runtest
            setattr(item, "runtest", lambda: _native._call_as_program_with_floor(runtest))  # noqa: B010
            replaced.append("runtest")
            yield
    finally:
        for name in replaced:
            delattr(item, name)
        undo_hooks()
        _native._work_end(own)


test_call_recorded.__test__ = False  # type: ignore[attr-defined]  # not a test, for pytest


def _directory(module: Any) -> str | None:
    file = getattr(module, "__file__", None)
    return os.path.dirname(os.path.abspath(file)) + os.sep if file else None


def runner_files(config: pytest.Config) -> list[str]:
    """Files (a directory when it ends in a separator) whose frames run the test: the
    frames now on the stack (the launcher's, pytest's, pluggy's, memtape's), pytest's,
    pluggy's, unittest's and memtape's packages, and every registered plugin's module (a
    plugin's wrapper of the test function, pytest-memray's for one). A capture leaves them
    out of its stacks below the test's own frames. Made again only when the files on the
    stack or the registered plugins changed since the last call."""
    on_stack = []
    frame = sys._getframe(1)
    while frame is not None:
        on_stack.append(frame.f_code.co_filename)
        frame = frame.f_back  # type: ignore[assignment]
    plugins = list(config.pluginmanager.get_plugins())
    key = (tuple(on_stack), tuple(map(id, plugins)))
    known = _runner_files.get(config)
    if known is not None and known[0] == key:
        return known[2]
    files = {
        d
        for d in (
            _directory(m) for m in (_pytest, pytest, pluggy, unittest, sys.modules["memtape"])
        )
        if d
    }
    files.update(on_stack)
    for plugin in plugins:
        module = plugin if inspect.ismodule(plugin) else inspect.getmodule(type(plugin))
        file = getattr(module, "__file__", None)
        if file:
            files.add(os.path.abspath(file))
    # A file under a directory of the list adds nothing (the directory matches it): each
    # capture's metadata lists these, and each analysis parses and matches them.
    directories = tuple(d for d in files if d.endswith(os.sep))
    made = sorted(f for f in files if f.endswith(os.sep) or not f.startswith(directories))
    # The plugins are kept with their ids, so that no id in the key is reused meanwhile.
    _runner_files[config] = (key, plugins, made)
    return made


# Per pytest session: the key of the last runner_files call, the plugins its ids name,
# and its answer.
_runner_files: weakref.WeakKeyDictionary[
    pytest.Config, tuple[tuple[tuple[str, ...], tuple[int, ...]], list[object], list[str]]
] = weakref.WeakKeyDictionary()
