"""Stopping and restarting pods, and the per-pod pause map, on every adapter.

Pins three behaviours of concurrency and recovery: a graceful shutdown (SIGTERM) of the
long lane (the pod's stop waits for the batches it runs, their outcomes are written,
then the leases are released); a pod's pause map is lost on restart (harmless: the row
and its attempts are in the store); and the pause state is per pod (kept by design:
docs/operations.md).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from jobledger.core.clock import FakeClock
from jobledger.domain.errors import TargetUnreachable
from jobledger.domain.events import EventType
from jobledger.domain.jobs import DeliveryMode, JobStatus
from jobledger.engine import Engine
from jobledger.reactors.runtime import Runtime
from jobledger.storage.port import Store
from tests.contract.lanes_kit import (
    Recorder,
    drain,
    enqueue,
    keys_in,
    make_engine,
    one_pod,
    pod,
    until,
)

AMO = DeliveryMode.AT_MOST_ONCE
ALO = DeliveryMode.AT_LEAST_ONCE
STOP_TIMEOUT_S = 10.0  # the default; the blocked handler is released after ~0.3 s
BLOCKED_S = 0.3  # real time the stop is watched while the handler is blocked


async def _types(store: Store, job_id: str) -> list[str]:
    return [e.type for e in await store.log.read_stream(f"job:{job_id}")]


async def _owned_by(store: Store, pod_id: str) -> set[int]:
    return {lease.partition for lease in await store.coordination.leases() if lease.owner == pod_id}


async def test_stop_waits_for_the_running_long_batch_then_releases_the_leases(
    store: Store, clock: FakeClock
) -> None:
    engine = make_engine(store, clock, stop_timeout_s=STOP_TIMEOUT_S)
    rec = Recorder()
    rec.gate = asyncio.Event()  # the long handler waits on it
    engine.targets.register("report", "long", rec, delivery_mode=ALO)
    runtime = Runtime(engine, pod_id="pod-a")
    await runtime.start()
    stopping: asyncio.Task[None] | None = None
    try:
        (job_id,) = await enqueue(engine, "report", [{"payload": "big"}])
        await asyncio.wait_for(rec.entered.wait(), 10)
        stopping = asyncio.create_task(runtime.stop())
        await until(lambda: runtime.long.stopping)  # the stop has reached the long lane
        await asyncio.sleep(BLOCKED_S)
        assert not stopping.done(), "stop returned while a long handler was still running"
        row = await store.admin.get_job(job_id)
        assert row is not None and row.status == JobStatus.RUNNING
        assert row.claimed_by == "pod-a"
        assert await _owned_by(store, "pod-a")  # not released while the batch runs
    finally:
        rec.gate.set()
        if stopping is None:
            await runtime.stop()
        else:
            await asyncio.wait_for(stopping, STOP_TIMEOUT_S)  # it returns once released
    # the run finished and its outcome was written before the stop returned
    assert await store.admin.get_job(job_id) is None
    types = await _types(store, job_id)
    assert types == [EventType.JOB_ENQUEUED, EventType.JOB_CLAIMED, EventType.JOB_SUCCEEDED]
    assert len(rec.calls) == 1  # ran once, not cancelled and run again
    # then the pod left: no lease, no liveness row
    assert await _owned_by(store, "pod-a") == set()
    assert "pod-a" not in await store.coordination.live_workers(clock.now() - timedelta(days=1))


def _register(engine: Engine, lane: str, handler: Recorder) -> None:
    mode = AMO if lane == "fast" else ALO  # the long lane's rows are claimed, not marked
    engine.targets.register("kafka:t", lane, handler, delivery_mode=mode)


@pytest.mark.parametrize("lane", ["fast", "long"])
async def test_a_restarted_pod_forgets_its_pauses_and_no_attempt_was_spent(
    store: Store, clock: FakeClock, lane: str
) -> None:
    # pod A: the target is unreachable, the row is deferred and the target paused
    engine_a = make_engine(store, clock)
    rec_a = Recorder()
    rec_a.always = TargetUnreachable("connection refused")
    _register(engine_a, lane, rec_a)
    a = Runtime(engine_a, pod_id="pod-a")
    await a.start()
    try:
        (job_id,) = await enqueue(engine_a, "kafka:t", [{"key": "k", "payload": 1}])
        await until(lambda: a.pauses.is_paused("kafka:t"))
        await until(lambda: _deferred(store, job_id))
    finally:
        await a.stop()
    assert len(rec_a.calls) == 1
    row = await store.admin.get_job(job_id)
    assert row is not None and row.status == JobStatus.PENDING and row.attempts == 0
    assert row.inflight_token is None and row.claim_token is None
    assert row.next_run_at <= clock.now()  # due now: nothing but the pause held it

    # pod B on the same store, the target reachable: the row goes at once, the clock
    # frozen well before A's probe interval (30 s) would have let a probe through
    engine_b = make_engine(store, clock)
    rec_b = Recorder()
    _register(engine_b, lane, rec_b)
    b = Runtime(engine_b, pod_id="pod-b")
    await b.start()
    try:
        assert not b.pauses.is_paused("kafka:t")
        await until(lambda: _gone(store, job_id), timeout_s=5)
    finally:
        await b.stop()
    assert [j.id for j in rec_b.calls] == [job_id]
    assert len(rec_a.calls) == 1
    events = await store.log.read_stream(f"job:{job_id}")
    first = EventType.JOB_DISPATCHED if lane == "fast" else EventType.JOB_CLAIMED
    assert [e.type for e in events] == [
        EventType.JOB_ENQUEUED,
        first,
        EventType.JOB_DEFERRED,
        first,
        EventType.JOB_SUCCEEDED,
    ]
    # one run counted, the one that succeeded: the deferral (unreachable) spent no attempt
    assert events[-1].data["attempts"] == 1


async def _deferred(store: Store, job_id: str) -> bool:
    return EventType.JOB_DEFERRED in await _types(store, job_id)


async def _gone(store: Store, job_id: str) -> bool:
    return await store.admin.get_job(job_id) is None


async def test_a_target_paused_on_one_pod_still_goes_from_the_other_pods_partitions(
    store: Store, clock: FakeClock
) -> None:
    engine_a, a, rec_a = await one_pod(store, clock)
    rec_a.always = TargetUnreachable("connection refused")  # unreachable from pod A
    engine_b = make_engine(store, clock)
    rec_b = Recorder()
    engine_b.targets.register("kafka:t", "fast", rec_b, delivery_mode=AMO)
    b = pod(engine_b, "pod-b")
    await b.leases.start()
    await a.leases.tick()  # A gives up half of its partitions ...
    await b.leases.tick()  # ... and B takes them
    assert sorted([len(a.leases.owned), len(b.leases.owned)]) == [32, 32]
    part_a, part_b = min(a.leases.owned), min(b.leases.owned)

    ka1, ka2 = keys_in(part_a, 2)
    held = await enqueue(engine_a, "kafka:t", [{"key": ka1}])
    await drain(a, part_a)
    assert len(rec_a.calls) == 1 and a.pauses.is_paused("kafka:t")

    # the clock does not move: A's probe is not due, so A sends nothing of the target
    held += await enqueue(engine_a, "kafka:t", [{"key": ka2}])
    keys_b = keys_in(part_b, 3)
    ids_b = await enqueue(engine_b, "kafka:t", [{"key": k, "payload": k} for k in keys_b])
    assert not b.pauses.is_paused("kafka:t")
    await drain(b, part_b)
    assert rec_b.payloads == keys_b  # B sends the target's rows of its own partitions
    for job_id in ids_b:
        assert await store.admin.get_job(job_id) is None
    assert await drain(a, part_a) == []
    assert len(rec_a.calls) == 1
    assert a.pauses.is_paused("kafka:t")  # B's successes do not resume A's pause
    for job_id in held:
        row = await store.admin.get_job(job_id)
        assert row is not None and row.status == JobStatus.PENDING and row.attempts == 0
