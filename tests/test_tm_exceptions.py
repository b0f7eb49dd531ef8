"""Tracebacks through exception handling, generators and coroutines."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine, Iterator
from types import ModuleType
from typing import Any

from snapshot_views import frame_rows
from source_lines import site

SIZE = 1000


def _here(tag: str) -> tuple[str, int]:
    return site(__file__, tag)


def _last_frames(tm: ModuleType, obj: object, count: int) -> tuple[tuple[str, int], ...]:
    tb = tm.get_object_traceback(obj)
    assert tb is not None, "object was not traced"
    return frame_rows(tb)[-count:]


class _Payload(Exception):
    pass


def _raise_with_payload() -> None:
    payload = bytearray(SIZE)  # @tm:exc-payload
    raise _Payload(payload)


def _call_raiser() -> None:
    _raise_with_payload()  # @tm:exc-caller


def _allocate() -> bytearray:
    return bytearray(SIZE)  # @tm:exc-allocate


def test_allocation_in_try_body(tm: ModuleType) -> None:
    tm.start(5)
    try:
        obj = bytearray(SIZE)  # @tm:exc-try
        raise KeyError("k")
    except KeyError:
        pass
    assert _last_frames(tm, obj, 1) == (_here("exc-try"),)


def test_allocation_in_except_block(tm: ModuleType) -> None:
    tm.start(5)
    try:
        raise KeyError("k")
    except KeyError:
        obj = bytearray(SIZE)  # @tm:exc-handler
        called = _allocate()  # @tm:exc-handler-call
    assert _last_frames(tm, obj, 1) == (_here("exc-handler"),)
    assert _last_frames(tm, called, 2) == (_here("exc-handler-call"), _here("exc-allocate"))


def test_allocation_in_finally_block(tm: ModuleType) -> None:
    tm.start(5)
    try:
        try:
            raise KeyError("k")
        finally:
            obj = bytearray(SIZE)  # @tm:exc-finally
    except KeyError:
        pass
    assert _last_frames(tm, obj, 1) == (_here("exc-finally"),)


def test_object_from_a_frame_that_raised(tm: ModuleType) -> None:
    tm.start(10)
    try:
        _call_raiser()  # @tm:exc-test
    except _Payload as exc:
        obj = exc.args[0]
    assert _last_frames(tm, obj, 3) == (
        _here("exc-test"),
        _here("exc-caller"),
        _here("exc-payload"),
    )


def test_tracemalloc_api_inside_an_exception_handler(tm: ModuleType) -> None:
    tm.start(5)
    obj = _allocate()
    try:
        raise ValueError("handled")
    except ValueError:
        tb = tm.get_object_traceback(obj)
        snapshot = tm.take_snapshot()
        stats = snapshot.statistics("lineno")
        current, peak = tm.get_traced_memory()
    assert tb is not None and frame_rows(tb)[-1] == _here("exc-allocate")
    assert any(frame_rows(s.traceback) == (_here("exc-allocate"),) for s in stats)
    assert 0 < current <= peak


def _generator() -> Iterator[bytearray]:
    yield bytearray(SIZE)  # @tm:gen-first
    yield bytearray(SIZE)  # @tm:gen-second


def _drive(gen: Iterator[bytearray]) -> bytearray:
    return next(gen)  # @tm:gen-drive


def test_generator_frames_link_to_the_resuming_caller(tm: ModuleType) -> None:
    tm.start(10)
    gen = _generator()
    first = next(gen)  # @tm:gen-next
    second = _drive(gen)  # @tm:gen-test-drive
    assert _last_frames(tm, first, 2) == (_here("gen-next"), _here("gen-first"))
    assert _last_frames(tm, second, 3) == (
        _here("gen-test-drive"),
        _here("gen-drive"),
        _here("gen-second"),
    )


async def _coro_inner() -> bytearray:
    return bytearray(SIZE)  # @tm:coro-inner


async def _coro_outer() -> bytearray:
    return await _coro_inner()  # @tm:coro-outer


def _run_by_hand(coro: Coroutine[Any, Any, bytearray]) -> bytearray:
    try:
        coro.send(None)  # @tm:coro-send
    except StopIteration as stop:
        result: bytearray = stop.value
        return result
    raise AssertionError("coroutine did not finish")


def test_coroutine_frames_chain_through_await(tm: ModuleType) -> None:
    tm.start(10)
    obj = _run_by_hand(_coro_outer())
    assert _last_frames(tm, obj, 3) == (
        _here("coro-send"),
        _here("coro-outer"),
        _here("coro-inner"),
    )


async def _after_a_suspension() -> bytearray:
    await asyncio.sleep(0)
    return bytearray(SIZE)  # @tm:coro-resumed


def test_resumed_coroutine_frames_chain_to_the_event_loop(tm: ModuleType) -> None:
    tm.start(25)
    obj = asyncio.run(_after_a_suspension())
    tb = tm.get_object_traceback(obj)
    assert tb is not None
    frames = frame_rows(tb)
    assert frames[-1] == _here("coro-resumed")
    assert any(name.endswith(os.path.join("asyncio", "events.py")) for name, _ in frames)
