"""`bounded_if_it_waits`: the Kafka target's enqueue timeout, armed only when aiokafka's
`send` has to wait (a stepped-by-hand coroutine must behave exactly as when awaited)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jobledger.targets.kafka.target import bounded_if_it_waits


async def ready(value: Any) -> Any:
    return value


async def waits(value: Any, seconds: float = 0.0) -> Any:
    await asyncio.sleep(seconds)
    await asyncio.sleep(0)  # more than one suspension
    return value


async def fails_after_waiting() -> None:
    await asyncio.sleep(0)
    raise ValueError("refused")


async def test_a_send_that_does_not_wait_arms_no_timer() -> None:
    loop = asyncio.get_running_loop()
    timers = len(loop._scheduled)  # type: ignore[attr-defined]
    assert await bounded_if_it_waits(ready("queued"), 0.01) == "queued"
    assert len(loop._scheduled) == timers  # type: ignore[attr-defined]


async def test_a_send_that_waits_briefly_returns_its_result() -> None:
    assert await bounded_if_it_waits(waits("queued", 0.001), 5.0) == "queued"


async def test_a_future_is_awaited_as_the_task_would() -> None:
    future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(future.set_result, "done")
    assert await bounded_if_it_waits(future, 5.0) == "done"


async def test_an_error_after_waiting_is_raised_as_it_is() -> None:
    with pytest.raises(ValueError, match="refused"):
        await bounded_if_it_waits(fails_after_waiting(), 5.0)


async def test_a_wait_past_the_bound_times_out_and_the_send_is_cancelled() -> None:
    cleaned = asyncio.Event()

    async def stuck() -> None:
        try:
            await asyncio.sleep(0)
            await asyncio.Event().wait()
        finally:
            cleaned.set()

    with pytest.raises(TimeoutError):
        await bounded_if_it_waits(stuck(), 0.05)
    assert cleaned.is_set()


async def test_an_outside_cancellation_stays_a_cancellation() -> None:
    started = asyncio.Event()

    async def stuck() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(bounded_if_it_waits(stuck(), 5.0))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_closing_a_suspended_send_closes_the_coroutine_it_runs() -> None:
    closed = []

    async def stuck() -> None:
        try:
            await asyncio.sleep(0)
            await asyncio.Event().wait()
        finally:
            closed.append(True)

    outer = bounded_if_it_waits(stuck(), 5.0)
    outer.send(None)  # the first step suspends at sleep(0)
    outer.send(None)  # the timed part starts, suspended on the event
    outer.close()
    assert closed == [True]
