"""run_each: concurrent chains with results in order, and nothing left running."""

from __future__ import annotations

import asyncio

import pytest

from jobledger.core.tasks import run_each


async def test_results_come_back_in_order_while_the_coroutines_overlap() -> None:
    started: list[int] = []
    gate = asyncio.Event()

    async def step(n: int) -> int:
        started.append(n)
        if n == 0:
            await gate.wait()  # the first only finishes once the last has started
        if n == 2:
            gate.set()
        return n * 10

    assert await run_each([step(0), step(1), step(2)]) == [0, 10, 20]
    assert started == [0, 1, 2]


async def slow(n: int, cancelled: list[int]) -> int:
    """Sleeps until cancelled, noting that it was."""
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        cancelled.append(n)
        raise
    return n


async def test_a_failure_cancels_the_others_and_is_raised() -> None:
    cancelled: list[int] = []

    async def boom() -> int:
        await asyncio.sleep(0)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await run_each([boom(), slow(1, cancelled), slow(2, cancelled)])
    assert sorted(cancelled) == [1, 2]


async def test_cancelling_the_caller_cancels_every_task() -> None:
    cancelled: list[int] = []
    outer = asyncio.create_task(run_each([slow(1, cancelled), slow(2, cancelled)]))
    await asyncio.sleep(0.01)
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert sorted(cancelled) == [1, 2]
