"""Helpers for the lane tests: pods on one store, rows in a chosen partition, settling.

A `Pod` is a real `Runtime` whose partition workers are not started as tasks, so a test
drives rounds by hand (`await pod.fast.step(p)`) under the `FakeClock`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from jobledger.core.clock import FakeClock
from jobledger.domain.jobs import DeliveryMode, Job
from jobledger.domain.policies import partition_of
from jobledger.engine import Engine
from jobledger.reactors.runtime import Runtime
from jobledger.storage.port import Store
from tests.builders import make_engine as make_engine  # shared with the other suites


def keys_in(partition: int, count: int, *, partitions: int = 64, prefix: str = "k") -> list[str]:
    """`count` distinct keys that hash to `partition`, in ascending order."""
    found: list[str] = []
    i = 0
    while len(found) < count:
        key = f"{prefix}{i:06d}"
        if partition_of(key, key, partitions) == partition:
            found.append(key)
        i += 1
    return found


class Recorder:
    """A handler that records what it was given and raises what the test queues."""

    def __init__(self) -> None:
        self.calls: list[Job] = []
        self.raises: list[BaseException | None] = []
        self.always: BaseException | None = None
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def __call__(self, job: Job) -> None:
        self.calls.append(job)
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.raises:
            exc = self.raises.pop(0)
            if exc is not None:
                raise exc
        elif self.always is not None:
            raise self.always

    @property
    def payloads(self) -> list[Any]:
        return [j.payload for j in self.calls]


def pod(engine: Engine, name: str) -> Runtime:
    runtime = Runtime(engine, pod_id=name)
    runtime.fast.autostart = False
    return runtime


async def one_pod(
    store: Store,
    clock: FakeClock,
    mode: DeliveryMode = DeliveryMode.AT_MOST_ONCE,
    **settings: Any,
) -> tuple[Engine, Runtime, Recorder]:
    """One pod holding every partition, its fast-lane target `kafka:t` a `Recorder`."""
    engine = make_engine(store, clock, **settings)
    rec = Recorder()
    engine.targets.register("kafka:t", "fast", rec, delivery_mode=mode)
    runtime = pod(engine, "pod-a")
    await runtime.leases.start()
    return engine, runtime, rec


async def enqueue(engine: Engine, target: str, items: list[dict[str, Any]]) -> list[str]:
    async with engine.transaction() as tx:
        done = [await engine.enqueue(target, tx=tx, **item) for item in items]
    return [d.job_id for d in done if d.job_id is not None]


async def drain(
    runtime: Runtime, partition: int, *, tick: bool = True, limit: int = 10_000
) -> list[int]:
    """Rounds of `partition` until its pass finds nothing to run: rows sent per round.

    With `tick` the pod first beats its lease heartbeat (the clock may have moved).
    """
    if tick:
        await runtime.leases.tick()
    sizes: list[int] = []
    for _ in range(limit):
        sent = await runtime.fast.step(partition)
        if sent is None:
            return sizes
        sizes.append(sent)
    raise AssertionError("partition never went idle")


async def until(check: Callable[[], Awaitable[bool] | bool], timeout_s: float = 10.0) -> None:
    """Poll `check` (real time, bounded) while background tasks make progress."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        await asyncio.sleep(0.002)
    raise AssertionError("condition not reached in time")


async def settle(rounds: int = 20) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0.001)
