"""Every delivery the engine made is in the log: a run whose outcome
lost its compare-and-set to another run's — the old owner of a partition sending while
its lease lapsed and the new owner resent — is recorded as `JobRedelivered`, without a
commit before any at-least-once send."""

from __future__ import annotations

import asyncio

from jobledger.admin.jobs import JobAdmin
from jobledger.core.clock import FakeClock
from jobledger.domain import job_outcomes
from jobledger.domain.events import EventType
from jobledger.domain.job_outcomes import OutcomePolicy, Result, RunResult
from jobledger.domain.jobs import DeliveryMode, Stamp
from jobledger.projections.jobs import JobsFold
from jobledger.storage.port import Store
from tests.contract.lanes_kit import Recorder, drain, enqueue, keys_in, make_engine, pod

P = 5


async def test_a_resend_after_a_takeover_leaves_both_deliveries_in_the_log(
    store: Store, clock: FakeClock
) -> None:
    engine_a = make_engine(store, clock)
    rec_a = Recorder()
    engine_a.targets.register("kafka:t", "fast", rec_a, delivery_mode="at_least_once")
    a = pod(engine_a, "pod-a")
    await a.leases.start()
    (job_id,) = await enqueue(engine_a, "kafka:t", [{"key": keys_in(P, 1)[0]}])
    rec_a.gate = asyncio.Event()  # pod-a's send hangs past its lease
    sending = asyncio.create_task(a.fast.step(P))
    await asyncio.wait_for(rec_a.entered.wait(), 10)
    clock.advance(seconds=31)
    engine_b = make_engine(store, clock)
    rec_b = Recorder()
    engine_b.targets.register("kafka:t", "fast", rec_b, delivery_mode="at_least_once")
    b = pod(engine_b, "pod-b")
    await b.leases.start()
    await drain(b, P)  # the new owner resends and writes its outcome first
    assert [j.id for j in rec_b.calls] == [job_id]
    rec_a.gate.set()  # the old send returns; its outcome loses the compare-and-set
    assert await sending == 1
    events = await store.log.read_stream(f"job:{job_id}")
    assert [e.type for e in events] == [
        EventType.JOB_ENQUEUED,
        EventType.JOB_SUCCEEDED,
        EventType.JOB_REDELIVERED,
    ]
    late = events[-1]
    assert late.data["pod"] == "pod-a" and late.data["result"] == "ok"
    assert late.prev_hash == events[-2].hash
    # the job stays closed for the read model, replay and the admin detail
    assert await store.admin.get_job(job_id) is None
    fold = JobsFold()
    for event in events:
        fold.feed(event)
    assert fold.rows == {} and fold.problems == []
    detail = await JobAdmin(store, clock).detail(job_id)
    assert detail.status == "SUCCEEDED" and not detail.open


async def test_a_late_record_is_a_compare_and_set_on_the_closed_stream(
    store: Store, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    engine.targets.register("kafka:t", "fast", Recorder(), delivery_mode="at_least_once")
    (job_id,) = await enqueue(engine, "kafka:t", [{"key": "b"}])
    run = RunResult(Result.OK, duration_ms=3.0)
    stamp = Stamp(clock.now())
    row = await store.admin.get_job(job_id)
    assert row is not None
    (done,) = await store.writes.apply(
        [job_outcomes.decide_outcome(row, run, _policy(), stamp).change]
    )
    assert done
    last = (await store.log.read_stream(row.stream))[-1]
    late = job_outcomes.redelivered(
        row.stream, last.version, last.hash,
        partition=row.partition, pod="pod-a", run=run, label="ok", stamp=stamp,
    )  # fmt: skip
    assert await store.writes.apply([late]) == [True]
    assert await store.writes.apply([late]) == [False]  # stale: the stream moved on
    assert await store.admin.get_job(job_id) is None
    types = [e.type for e in await store.log.read_stream(row.stream)]
    assert types == [EventType.JOB_ENQUEUED, EventType.JOB_SUCCEEDED, EventType.JOB_REDELIVERED]


async def test_an_open_row_owned_by_another_run_gets_no_record(
    store: Store, clock: FakeClock
) -> None:
    """The old owner's late outcome on a row the new owner is running: recording it
    would move the stream under the new owner and lose *its* outcome."""
    engine = make_engine(store, clock)
    engine.targets.register("kafka:t", "fast", Recorder(), delivery_mode="at_least_once")
    (job_id,) = await enqueue(engine, "kafka:t", [{"key": "c"}])
    row = await store.admin.get_job(job_id)
    assert row is not None
    a = pod(engine, "pod-a")
    stale = job_outcomes.decide_outcome(row, RunResult(Result.OK), _policy(), Stamp(clock.now()))
    await a.outcomes.record_lost(row, RunResult(Result.OK), stale, "pod-a")
    assert [e.type for e in await store.log.read_stream(row.stream)] == [EventType.JOB_ENQUEUED]


def _policy() -> OutcomePolicy:
    return OutcomePolicy(DeliveryMode.AT_LEAST_ONCE, 6, (1, 2, 4, 8, 16))
