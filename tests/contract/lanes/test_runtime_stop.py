"""`Runtime.stop` is bounded by `stop_timeout_s`, on every adapter.

A run still going when the in-flight share of the timeout is used up is cancelled; its
row has no outcome written. A fast-lane row stays for the next owner of its partition —
at-least-once runs again, at-most-once (marked in flight before the send) is judged
DEAD by the takeover, never sent twice. A long-lane row of an at-least-once target is
given back (PENDING, due now) and the next pod runs it at once; an at-most-once one
keeps its claim until whoever takes it over judges it DEAD. A run that ignores its cancellation does not hold the stop up either; its
partition then stays leased (another pod must not run the key while it may still send)
until the lease expires. The process-level side (a `jobledger worker` whose database is
unreachable) is tests/integration/test_worker_stop.py.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from jobledger.core.clock import FakeClock
from jobledger.domain.jobs import DeliveryMode, Job, JobStatus
from jobledger.reactors.runtime import Runtime
from jobledger.storage.port import Store
from tests.contract.lanes_kit import Recorder, enqueue, make_engine, until

STOP_TIMEOUT_S = 2.0
SLACK_S = 0.5  # the cancelled run's unwinding, the store's writes, a busy test machine


@pytest.mark.parametrize("mode", [DeliveryMode.AT_LEAST_ONCE, DeliveryMode.AT_MOST_ONCE])
async def test_a_run_outliving_the_stop_timeout_is_cancelled_and_its_row_stays(
    store: Store, clock: FakeClock, mode: DeliveryMode
) -> None:
    engine = make_engine(store, clock, stop_timeout_s=STOP_TIMEOUT_S)
    rec = Recorder()
    rec.gate = asyncio.Event()  # never opened for the first pod: the run hangs
    engine.targets.register("kafka:t", "fast", rec, delivery_mode=mode)
    first = Runtime(engine, pod_id="pod-a")
    await first.start()
    try:
        (job_id,) = await enqueue(engine, "kafka:t", [{"key": "k", "payload": 1}])
        await asyncio.wait_for(rec.entered.wait(), 10)
    finally:
        await _stop_in_time(first)
    row = await store.admin.get_job(job_id)
    assert row is not None and row.status == JobStatus.PENDING  # no outcome was written
    assert all(
        lease.owner is None for lease in await store.coordination.leases()
    )  # released: it stopped

    rec.gate = None
    second = Runtime(engine, pod_id="pod-b")
    await second.start()
    try:
        if mode == DeliveryMode.AT_LEAST_ONCE:
            await until(lambda: len(rec.calls) == 2)  # sent again by the next owner
            await until(lambda: _closed(store, job_id))
        else:
            await _judged_dead(store, job_id, "in flight when its partition was taken over")
            assert len(rec.calls) == 1  # at most once: never sent again
    finally:
        await second.stop()


async def _stop_in_time(runtime: Runtime) -> None:
    started = time.monotonic()
    await runtime.stop()
    took = time.monotonic() - started
    assert took <= STOP_TIMEOUT_S + SLACK_S, f"stop took {took:.2f}s"


async def _judged_dead(store: Store, job_id: str, reason: str) -> None:
    await until(lambda: _closed(store, job_id))
    dead = await store.admin.get_job(job_id)
    assert dead is not None and dead.status == JobStatus.DEAD
    assert dead.dead_reason == reason


async def _closed(store: Store, job_id: str) -> bool:
    row = await store.admin.get_job(job_id)
    return row is None or row.status == JobStatus.DEAD


async def test_a_run_ignoring_its_cancellation_does_not_hold_the_stop_nor_lose_the_lease(
    store: Store, clock: FakeClock
) -> None:
    engine = make_engine(store, clock, stop_timeout_s=STOP_TIMEOUT_S)
    entered, done = asyncio.Event(), asyncio.Event()

    async def stubborn(job: Job) -> None:
        entered.set()
        while not done.is_set():
            try:
                await done.wait()
            except asyncio.CancelledError:
                continue  # ignores the stop's cancellation

    engine.targets.register("kafka:t", "fast", stubborn, delivery_mode=DeliveryMode.AT_LEAST_ONCE)
    runtime = Runtime(engine, pod_id="pod-a")
    await runtime.start()
    try:
        (job_id,) = await enqueue(engine, "kafka:t", [{"key": "k", "payload": 1}])
        await asyncio.wait_for(entered.wait(), 10)
        await _stop_in_time(runtime)
        row = await store.admin.get_job(job_id)
        assert row is not None
        held = {
            lease.partition for lease in await store.coordination.leases() if lease.owner == "pod-a"
        }
        assert row.partition in held  # kept until it expires: the run may still send
    finally:
        done.set()
        tasks = [w.task for w in runtime.fast.workers.values() if w.task is not None]
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)


async def test_a_long_run_cut_short_by_the_stop_is_given_back_or_left_for_the_takeover(
    store: Store, clock: FakeClock
) -> None:
    """At-least-once: PENDING, claim dropped, no attempt spent, due now: the next pod
    runs it at once (the clock is not moved: no lease runs out). At-most-once: the claim
    stays (the run may have made its side effect) and the reserve that finds its lease
    expired judges it DEAD."""
    engine = make_engine(store, clock, stop_timeout_s=STOP_TIMEOUT_S)
    alo, amo = Recorder(), Recorder()
    alo.gate, amo.gate = asyncio.Event(), asyncio.Event()  # never opened: the runs hang
    engine.targets.register("long:alo", "long", alo, delivery_mode=DeliveryMode.AT_LEAST_ONCE)
    engine.targets.register("long:amo", "long", amo, delivery_mode=DeliveryMode.AT_MOST_ONCE)
    first = Runtime(engine, pod_id="pod-a")
    await first.start()
    try:
        (alo_id,) = await enqueue(engine, "long:alo", [{"payload": 1}])
        (amo_id,) = await enqueue(engine, "long:amo", [{"payload": 2}])
        await asyncio.wait_for(asyncio.gather(alo.entered.wait(), amo.entered.wait()), 10)
        flight = first.in_flight()
        assert (flight.at_least_once, flight.at_most_once) == (1, 1)
    finally:
        await _stop_in_time(first)

    given = await store.admin.get_job(alo_id)
    assert given is not None and given.status == JobStatus.PENDING
    assert given.attempts == 0 and given.claim_token is None and given.lease_until is None
    assert given.next_run_at <= clock.now()
    (requeued,) = [e for e in await store.log.read_stream(given.stream) if e.type == "JobRequeued"]
    assert requeued.data["reason"] == "stopped"
    kept = await store.admin.get_job(amo_id)
    assert kept is not None and kept.status == JobStatus.RUNNING and kept.claimed_by == "pod-a"

    alo.gate = amo.gate = None
    second = Runtime(engine, pod_id="pod-b")
    await second.start()
    try:
        await until(lambda: len(alo.calls) == 2, 5)  # at once: no lease had to run out
        await until(lambda: _closed(store, alo_id))
        assert len(amo.calls) == 1
        clock.advance(seconds=engine.settings.long_lease_s + 1)
        second.long.wake()
        reason = "lease expired while running; the first run may have finished"
        await _judged_dead(store, amo_id, reason)
        assert len(amo.calls) == 1  # at most once: never run again
    finally:
        await second.stop()
