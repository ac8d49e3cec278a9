"""A handler that calls `sys.exit()` fails its job; it does not stop the pod.

`SystemExit` is not an `Exception`: raised by a handler (a plain `def` run in a thread
re-raises it on the loop), it used to escape the outcome path and end the lane's task,
so the pod stopped delivering — and on restart the same job ended every pod it reached.
"""

from __future__ import annotations

import sys

import pytest

from jobledger.core.clock import FakeClock
from jobledger.domain.jobs import DeliveryMode, Job, JobStatus
from jobledger.reactors.runtime import Runtime
from jobledger.storage.memory import MemoryStore
from tests.builders import make_engine
from tests.contract.lanes_kit import enqueue, until


@pytest.mark.parametrize("lane", ["fast", "long"])
@pytest.mark.parametrize("plain", [True, False], ids=["def", "async def"])
async def test_sys_exit_in_a_handler_is_a_failed_run(lane: str, plain: bool) -> None:
    store, clock = MemoryStore(partitions=4), FakeClock()
    engine = make_engine(store, clock)
    delivered: list[str] = []

    def exits(job: Job) -> None:
        sys.exit(3)

    async def exits_async(job: Job) -> None:
        sys.exit(3)

    async def fine(job: Job) -> None:
        delivered.append(job.id)

    engine.targets.register(
        "x:exit",
        lane,
        exits if plain else exits_async,
        delivery_mode=DeliveryMode.AT_LEAST_ONCE,
    )
    engine.targets.register("x:fine", lane, fine)
    pod = Runtime(engine, pod_id="pod-a")
    await pod.start()
    try:
        (bad,) = await enqueue(engine, "x:exit", [{"key": "a", "payload": 1}])

        async def failed() -> bool:
            row = await store.admin.get_job(bad)
            return row is not None and row.attempts == 1 and row.status == JobStatus.PENDING

        await until(failed)
        row = await store.admin.get_job(bad)
        assert row is not None and row.last_error is not None and "sys.exit(3)" in row.last_error
        (good,) = await enqueue(engine, "x:fine", [{"key": "b", "payload": 2}])
        await until(lambda: delivered == [good])  # the pod still delivers
    finally:
        await pod.stop()
