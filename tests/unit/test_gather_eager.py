"""`fast_lane.gather_eager`: the eager start of a round's chains behaves like gather."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from jobledger.reactors.fast_lane import gather_eager

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="outer")


async def _quick(n: int) -> int:
    return n


async def _slow(n: int) -> int:
    token = VAR.set(f"inner{n}")  # set before the suspension, reset after it
    await asyncio.sleep(0.001)
    await asyncio.sleep(0)
    assert VAR.get() == f"inner{n}"
    VAR.reset(token)  # fails if the steps ran in different contexts
    return n * 10


async def test_results_keep_order_whether_or_not_a_coroutine_suspends() -> None:
    assert await gather_eager([_quick(1), _slow(2), _quick(3), _slow(4)]) == [1, 20, 3, 40]
    assert VAR.get() == "outer"  # each coroutine ran in its own context copy


async def test_a_future_exception_reaches_the_coroutine() -> None:
    async def awaits_failure() -> str:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(fut.set_exception, ValueError("boom"))
        try:
            await fut
        except ValueError as exc:
            return str(exc)
        return "no error"

    assert await gather_eager([awaits_failure()]) == ["boom"]


async def test_an_error_in_the_eager_step_closes_the_rest() -> None:
    async def fails() -> int:
        raise RuntimeError("first step")

    rest = _quick(2)
    with pytest.raises(RuntimeError, match="first step"):
        await gather_eager([_slow(1), fails(), rest])
    assert rest.cr_frame is None  # closed, never "never awaited"


async def test_cancelling_the_caller_cancels_a_suspended_coroutine() -> None:
    seen: list[str] = []

    async def waits() -> int:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return 1

    task = asyncio.create_task(gather_eager([waits()]))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"]
