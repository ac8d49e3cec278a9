"""An at-most-once row whose in-flight mark was committed but that was not sent must be
released in the round's own commit: left marked, it holds every later
version of its key and is declared DEAD "in flight" at the next takeover, though it
never went out."""

from __future__ import annotations

from jobledger.core.clock import FakeClock
from jobledger.domain.errors import TargetUnreachable
from jobledger.domain.events import EventType
from jobledger.domain.jobs import Job, JobStatus
from jobledger.reactors.runtime import Runtime
from jobledger.storage.port import Store
from tests.contract.lanes_kit import (
    Recorder,
    drain,
    enqueue,
    keys_in,
    make_engine,
    pod,
    settle,
    until,
)

P = 5


async def test_a_marked_row_its_paused_target_skipped_is_released_and_sent_later(
    store: Store, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    rec = Recorder()
    rec.raises = [TargetUnreachable("connection refused")]  # the first try only
    engine.targets.register("kafka:t", "fast", rec, delivery_mode="at_most_once")
    runtime = Runtime(engine, pod_id="pod-a")
    await runtime.start()
    try:
        # two keys of one target in different partitions, in one transaction: both
        # partitions mark their row in one group commit, then the first send pauses
        # the target while the other row is marked and about to go
        (k1,) = keys_in(3, 1)
        (k2,) = keys_in(9, 1)
        ids = await enqueue(engine, "kafka:t", [{"key": k1}, {"key": k2}])
        await until(lambda: bool(rec.calls) and runtime.pauses.is_paused("kafka:t"))
        await settle(50)

        async def unmarked() -> bool:
            rows = [await store.admin.get_job(i) for i in ids]
            return all(r is not None and r.inflight_token is None for r in rows)

        await until(unmarked)  # nothing holds its key while the target is paused
        for job_id in ids:  # the unsent row's mark was cleared by a deferral
            types = [e.type for e in await store.log.read_stream(f"job:{job_id}")]
            assert types[-1] == EventType.JOB_DEFERRED, types
        # the target recovers: the probe goes out, then the other row
        for _ in range(100):
            if all([await store.admin.get_job(i) is None for i in ids]):
                break
            clock.advance(seconds=5)
            await settle()
        assert [await store.admin.get_job(i) for i in ids] == [None, None]
        sent: list[Job] = rec.calls
        assert sorted(j.id for j in sent[1:]) == sorted(ids)  # each delivered once after
        for job_id in ids:
            types = [e.type for e in await store.log.read_stream(f"job:{job_id}")]
            assert EventType.JOB_DEAD not in types
            assert types[-1] == EventType.JOB_SUCCEEDED
    finally:
        await runtime.stop()


async def test_a_carried_mark_is_released_when_the_lease_ends_before_its_send(
    store: Store, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    rec = Recorder()
    engine.targets.register("kafka:t", "fast", rec, delivery_mode="at_most_once")
    runtime = pod(engine, "pod-a")
    await runtime.leases.start()
    first, second = await enqueue(engine, "kafka:t", [{"key": k} for k in keys_in(P, 2)])
    # round one sends the first row; its commit marks the second (the carried round)
    assert await runtime.fast.step(P) == 1
    row = await store.admin.get_job(second)
    assert row is not None and row.inflight_token is not None
    # the pod stalls: 23 s of a 30 s lease leave less than its 7.5 s safety margin
    clock.advance(seconds=23)
    assert await runtime.fast.step(P) is None
    assert [j.id for j in rec.calls] == [first]
    row = await store.admin.get_job(second)
    assert row is not None and row.inflight_token is None and row.status == JobStatus.PENDING
    last = (await store.log.read_stream(f"job:{second}"))[-1]
    assert last.type == EventType.JOB_DEFERRED and last.data["reason"] == "not_sent"
    # the heartbeat renews the lease: a fresh worker sends it (not DEAD "in flight")
    await drain(runtime, P)
    assert [j.id for j in rec.calls] == [first, second]


async def test_no_send_starts_once_the_lease_margin_is_reached(
    store: Store, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    calls: list[int] = []

    async def slow(job: Job) -> None:
        calls.append(job.version)
        clock.advance(seconds=12)  # each send takes 12 s of the 30 s lease

    engine.targets.register("kafka:t", "fast", slow, delivery_mode="at_least_once")
    runtime = pod(engine, "pod-a")
    await runtime.leases.start()
    (key,) = keys_in(P, 1)
    ids = await enqueue(engine, "kafka:t", [{"key": key, "version": v} for v in (1, 2, 3)])
    # one round holds the whole chain; at 24 s the lease (30 s, margin 7.5 s) is too
    # short for another send, so the third row waits for the next owner or lease
    assert await runtime.fast.step(P) == 2
    assert calls == [1, 2]
    assert runtime.fast.workers[P].lost
    assert await store.admin.get_job(ids[0]) is None and await store.admin.get_job(ids[1]) is None
    assert await store.admin.get_job(ids[2]) is not None  # the outcomes of the sent rows are kept
    await drain(runtime, P)
    assert calls == [1, 2, 3]
