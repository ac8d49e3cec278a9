"""Handlers the Python way: a decorator, and plain `def` handlers that
run in a worker thread instead of failing on `await None` after their side effect."""

from __future__ import annotations

import asyncio
import functools
import threading
from typing import Any

import pytest

from jobledger.core.registry import TargetRegistry, as_async, is_async_handler
from jobledger.domain.errors import DuplicateTarget
from jobledger.domain.jobs import DeliveryMode, Job, Lane


async def coroutine_handler(job: Job) -> None:
    return None


def blocking_handler(job: Job) -> str:
    return threading.current_thread().name


class AsyncCallable:
    async def __call__(self, job: Job) -> None:
        return None


def test_async_handlers_are_recognised_and_kept_as_they_are() -> None:
    for handler in (coroutine_handler, AsyncCallable(), functools.partial(coroutine_handler)):
        assert is_async_handler(handler)
        assert as_async(handler) is handler
    assert not is_async_handler(blocking_handler)
    assert not is_async_handler(lambda job: None)


async def test_a_plain_def_runs_in_a_worker_thread() -> None:
    wrapped = as_async(blocking_handler)
    ran_in = await wrapped(Any)  # type: ignore[arg-type]
    assert ran_in != threading.current_thread().name
    assert wrapped.__name__ == "blocking_handler"


async def test_a_plain_def_returning_an_awaitable_has_it_awaited() -> None:
    done = asyncio.Event()

    async def later() -> str:
        done.set()
        return "awaited"

    assert await as_async(lambda job: later())(Any) == "awaited"  # type: ignore[arg-type]
    assert done.is_set()


def test_the_decorator_registers_and_returns_the_function() -> None:
    registry = TargetRegistry()

    @registry.target("mail:welcome", "long", delivery_mode="at_least_once")
    def send_welcome(job: Job) -> None:
        return None

    target = registry.get("mail:welcome")
    assert send_welcome.__name__ == "send_welcome"  # the module keeps its function
    assert (target.lane, target.delivery_mode) == (Lane.LONG, DeliveryMode.AT_LEAST_ONCE)
    assert is_async_handler(target.handler)
    with pytest.raises(DuplicateTarget):
        registry.target("mail:welcome")(send_welcome)
