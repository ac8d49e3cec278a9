"""A partition worker's states as a running pod goes through them: IDLE while it waits,
IN_ROUND (busy: the lease keeper keeps the partition) while a handler runs, back to
IDLE; a stop that comes mid-round lets the round finish and write its outcome, then the
worker is STOPPED; a lost lease makes it LOST."""

from __future__ import annotations

import asyncio

from jobledger.core.clock import FakeClock
from jobledger.reactors.fast_states import IDLE, IN_ROUND, LOST, STOPPED, STOPPING
from jobledger.reactors.long_lane import LongLaneState
from jobledger.reactors.runtime import Runtime
from jobledger.storage.port import Store
from tests.contract.lanes_kit import Recorder, enqueue, keys_in, make_engine, until

P = 7


async def test_a_worker_waits_runs_a_round_and_stops_after_it(
    store: Store, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    rec = Recorder()
    rec.gate = asyncio.Event()
    engine.targets.register("kafka:t", "fast", rec, delivery_mode="at_least_once")
    runtime = Runtime(engine, pod_id="pod-a")
    await runtime.start()
    try:
        worker = runtime.fast.workers[P]
        await until(lambda: worker.state is IDLE)
        (job_id,) = await enqueue(engine, "kafka:t", [{"key": keys_in(P, 1)[0]}])
        await until(lambda: bool(rec.calls))
        assert worker.state is IN_ROUND and worker.busy and runtime.fast.busy(P)
        rec.gate.set()
        await until(lambda: worker.state is IDLE)
        assert not worker.busy
        assert await store.admin.get_job(job_id) is None  # its outcome is written

        rec.gate = asyncio.Event()
        (second,) = await enqueue(engine, "kafka:t", [{"key": keys_in(P, 2)[1]}])
        await until(lambda: len(rec.calls) == 2)
        release = asyncio.create_task(runtime.fast.release(P))  # a stop mid-round
        await until(lambda: worker.state is STOPPING)
        assert not release.done()  # the round under way is waited for
        rec.gate.set()
        await release
        assert worker.state is STOPPED
        assert await store.admin.get_job(second) is None  # its outcome written before the stop
    finally:
        await runtime.stop()


async def test_a_lost_lease_makes_the_worker_lost(store: Store, clock: FakeClock) -> None:
    engine = make_engine(store, clock)
    engine.targets.register("kafka:t", "fast", Recorder())
    runtime = Runtime(engine, pod_id="pod-a")
    await runtime.start()
    try:
        worker = runtime.fast.workers[P]
        await until(lambda: worker.state is IDLE)
        await runtime.fast.lost(P)
        assert worker.state is LOST and worker.stopping
        await worker.join()
        assert worker.state is LOST and P not in runtime.fast.workers
    finally:
        await runtime.stop()


async def test_the_long_lane_stops_once_and_a_second_stop_is_harmless(
    store: Store, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    runtime = Runtime(engine, pod_id="pod-a")
    await runtime.start()
    try:
        await until(lambda: runtime.long.state is LongLaneState.IDLE)
    finally:
        await runtime.stop()
    assert runtime.long.state is LongLaneState.STOPPED
    await runtime.long.stop()  # again: nothing to do
    assert runtime.long.state is LongLaneState.STOPPED
