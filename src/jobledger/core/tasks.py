"""Running and stopping tasks: the one way every part of the engine does it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None) -> None:
    """Cancel `tasks` (None entries are skipped) and wait until each has finished; their
    cancellation is the expected end, not an error."""
    live = [task for task in tasks if task is not None]
    for task in live:
        task.cancel()
    for task in live:
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def run_each(coros: list[Coroutine[Any, Any, T]]) -> list[T]:
    """Run `coros` concurrently, each in its own task, and return their results in order.

    `asyncio.gather` without its gathering future and per-child callbacks (the fast lane
    runs a round's chains through here). If this call is cancelled or a coroutine
    raises, the tasks still running are cancelled and waited for before it re-raises.
    """
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(coro) for coro in coros]
    results: list[T] = []
    try:
        for task in tasks:
            results.append(await task)
    except BaseException:
        await cancel_and_wait(*(task for task in tasks if not task.done()))
        for task in tasks:  # retrieve what the others raised: nothing is left unobserved
            if task.done() and not task.cancelled():
                task.exception()
        raise
    return results
