"""Long lane behaviour over every adapter: claims, leases, exclusive codes, reclaims."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from jobledger.core.clock import FakeClock
from jobledger.domain.errors import SkipRun, TargetUnreachable
from jobledger.domain.events import EventType
from jobledger.domain.jobs import DeliveryMode, JobStatus
from jobledger.storage.port import Store
from tests.contract.lanes_kit import Recorder, enqueue, make_engine, pod, settle, until
from tests.stores import all_jobs

ALO = DeliveryMode.AT_LEAST_ONCE
AMO = DeliveryMode.AT_MOST_ONCE


def long_pod(store: Store, clock: FakeClock, name: str, mode=ALO, exclusive=False, **settings):
    engine = make_engine(store, clock, **settings)
    rec = Recorder()
    engine.targets.register("report", "long", rec, delivery_mode=mode, exclusive=exclusive)
    return engine, pod(engine, name), rec


async def test_reserve_takes_at_most_10_under_one_token_and_a_5_min_lease(
    store: Store, clock: FakeClock
) -> None:
    engine, a, _ = long_pod(store, clock, "pod-a")
    await enqueue(engine, "report", [{"payload": i} for i in range(15)])
    rows = await a.long.reserve()
    assert len(rows) == 10
    assert len({r.claim_token for r in rows}) == 1
    for row in rows:
        stored = await store.admin.get_job(row.id)
        assert stored is not None and stored.status == JobStatus.RUNNING
        assert stored.lease_until == clock.now() + timedelta(minutes=5)
        assert stored.claimed_by == "pod-a"
    assert len(await a.long.reserve()) == 5


async def test_a_7_minute_run_is_never_reclaimed(store: Store, clock: FakeClock) -> None:
    engine, a, rec = long_pod(store, clock, "pod-a")
    _, b, rec_b = long_pod(store, clock, "pod-b")
    (job_id,) = await enqueue(engine, "report", [{"payload": "big"}])
    rec.gate = asyncio.Event()
    task = a.long.start_batch(await a.long.reserve())
    await asyncio.wait_for(rec.entered.wait(), 10)
    for _ in range(7):
        clock.advance(minutes=1)
        await until(lambda: _lease_moved(store, job_id, clock))
        assert await b.long.reserve() == []
    rec.gate.set()
    await asyncio.wait_for(task, 10)
    assert await store.admin.get_job(job_id) is None
    assert rec_b.calls == []
    types = [e.type for e in await store.log.read_stream(f"job:{job_id}")]
    assert types.count(EventType.JOB_LEASE_RENEWED) == 7


async def _lease_moved(store: Store, job_id: str, clock: FakeClock) -> bool:
    row = await store.admin.get_job(job_id)
    return row is not None and row.lease_until == clock.now() + timedelta(minutes=5)


async def test_reclaim_after_pod_death_reruns_at_least_once(store: Store, clock: FakeClock) -> None:
    engine, a, _ = long_pod(store, clock, "pod-a")
    _, b, rec_b = long_pod(store, clock, "pod-b")
    (job_id,) = await enqueue(engine, "report", [{}])
    assert len(await a.long.reserve()) == 1  # ... and pod-a dies
    clock.advance(minutes=4, seconds=59)
    assert await b.long.reserve() == []
    clock.advance(seconds=1)
    rows = await b.long.reserve()
    assert [r.id for r in rows] == [job_id] and rows[0].claimed_by == "pod-b"
    await b.long.run_batch(rows)
    assert len(rec_b.calls) == 1 and await store.admin.get_job(job_id) is None


async def test_reclaim_of_an_at_most_once_row_is_dead(store: Store, clock: FakeClock) -> None:
    engine, a, _ = long_pod(store, clock, "pod-a", mode=AMO)
    _, b, rec_b = long_pod(store, clock, "pod-b", mode=AMO)
    (job_id,) = await enqueue(engine, "report", [{}])
    assert len(await a.long.reserve()) == 1
    clock.advance(minutes=5)
    assert await b.long.reserve() == []
    row = await store.admin.get_job(job_id)
    assert row is not None and row.status == JobStatus.DEAD
    assert row.dead_reason is not None and "lease expired" in row.dead_reason
    assert rec_b.calls == []


async def test_a_lease_expiry_names_its_reason_in_the_alert_and_the_log(
    store: Store, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The dead alert after a lease expiry said `error=None`: it names the ending now,
    and the JobDead carries the failure record with reason `lease_expired`."""
    engine, a, _ = long_pod(store, clock, "pod-a", mode=AMO)
    _, b, _ = long_pod(store, clock, "pod-b", mode=AMO)
    (job_id,) = await enqueue(engine, "report", [{}])
    assert len(await a.long.reserve()) == 1
    clock.advance(minutes=5)
    caplog.set_level("INFO", logger="jobledger.run")
    assert await b.long.reserve() == []
    (alert,) = [r for r in caplog.records if "job dead alert" in r.getMessage()]
    assert "error=None" not in alert.getMessage()
    assert "lease expired" in alert.getMessage() and alert.error  # type: ignore[attr-defined]
    dead = (await store.log.read_stream(f"job:{job_id}"))[-1]
    assert dead.type == EventType.JOB_DEAD
    assert dead.data["failure"]["reason"] == "lease_expired"
    assert dead.data["failure"]["attempt"] == 1


async def test_concurrent_reserves_never_share_a_row(store: Store, clock: FakeClock) -> None:
    engine, a, _ = long_pod(store, clock, "pod-a")
    _, b, _ = long_pod(store, clock, "pod-b")
    await enqueue(engine, "report", [{"payload": i} for i in range(15)])
    got_a, got_b = await asyncio.gather(a.long.reserve(), b.long.reserve())
    ids_a, ids_b = {r.id for r in got_a}, {r.id for r in got_b}
    assert not ids_a & ids_b
    assert len(ids_a | ids_b) == min(15, len(got_a) + len(got_b))
    for row in await all_jobs(store):
        if row.status == JobStatus.RUNNING:
            assert row.claimed_by in ("pod-a", "pod-b")


async def test_exclusive_code_has_one_running_row_across_pods(
    store: Store, clock: FakeClock
) -> None:
    engine, a, _ = long_pod(store, clock, "pod-a", exclusive=True)
    engine.targets.register("other", "long", Recorder())
    _, b, _ = long_pod(store, clock, "pod-b", exclusive=True)
    await enqueue(engine, "report", [{"payload": i, "code": "nightly"} for i in range(3)])
    await enqueue(engine, "other", [{"payload": i} for i in range(2)])
    rows = await a.long.reserve()
    assert sorted(r.code for r in rows) == ["nightly", "other", "other"]
    assert await b.long.reserve() == []
    running = [
        r for r in await all_jobs(store) if r.status == JobStatus.RUNNING and r.code == "nightly"
    ]
    assert len(running) == 1 and running[0].running_code == "nightly"


async def test_taken_over_pod_cannot_write_a_stale_outcome(store: Store, clock: FakeClock) -> None:
    engine, a, rec_a = long_pod(store, clock, "pod-a")
    _, b, rec_b = long_pod(store, clock, "pod-b")
    (job_id,) = await enqueue(engine, "report", [{}])
    stalled = await a.long.reserve()
    clock.advance(minutes=6)
    taken = await b.long.reserve()
    assert [r.id for r in taken] == [job_id]
    await a.long.run_batch(stalled)  # pod-a wakes up and finishes its (old) run
    row = await store.admin.get_job(job_id)
    assert row is not None and row.status == JobStatus.RUNNING and row.claimed_by == "pod-b"
    assert len(rec_a.calls) == 1
    await b.long.run_batch(taken)
    assert await store.admin.get_job(job_id) is None and len(rec_b.calls) == 1


async def test_long_backoff_and_dead_at_the_per_code_count(store: Store, clock: FakeClock) -> None:
    engine, a, rec = long_pod(store, clock, "pod-a")
    engine.targets.set_max_attempts("report", 3)
    rec.always = RuntimeError("boom")
    (job_id,) = await enqueue(engine, "report", [{}])
    for attempt, wait in ((1, 1), (2, 2)):
        await a.long.run_batch(await a.long.reserve())
        row = await store.admin.get_job(job_id)
        assert row is not None and row.status == JobStatus.PENDING and row.attempts == attempt
        assert row.claim_token is None and row.next_run_at == clock.now() + timedelta(minutes=wait)
        assert await a.long.reserve() == []
        clock.advance(minutes=wait)
    await a.long.run_batch(await a.long.reserve())
    row = await store.admin.get_job(job_id)
    assert row is not None and row.status == JobStatus.DEAD and row.attempts == 3


async def test_long_unreachable_releases_without_an_attempt(store: Store, clock: FakeClock) -> None:
    engine, a, rec = long_pod(store, clock, "pod-a")
    rec.raises = [TargetUnreachable("down")]
    (job_id,) = await enqueue(engine, "report", [{}])
    await a.long.run_batch(await a.long.reserve())
    row = await store.admin.get_job(job_id)
    assert row is not None and row.status == JobStatus.PENDING and row.attempts == 0
    assert a.pauses.is_paused("report")
    assert await a.long.reserve() == []  # paused
    clock.advance(seconds=30)
    await a.long.run_batch(await a.long.reserve())  # the probe
    assert await store.admin.get_job(job_id) is None and not a.pauses.is_paused("report")


async def test_skip_run_leaves_with_the_reason(store: Store, clock: FakeClock) -> None:
    engine, a, rec = long_pod(store, clock, "pod-a", exclusive=True)
    rec.raises = [SkipRun("previous_slot_running")]
    (job_id,) = await enqueue(engine, "report", [{}])
    await a.long.run_batch(await a.long.reserve())
    assert await store.admin.get_job(job_id) is None
    last = (await store.log.read_stream(f"job:{job_id}"))[-1]
    assert last.type == EventType.JOB_SKIPPED and last.data["reason"] == "previous_slot_running"


@pytest.mark.parametrize("exclusive", [True])
async def test_other_codes_keep_running_while_one_exclusive_code_runs_long(
    store: Store, clock: FakeClock, exclusive: bool
) -> None:
    engine, a, rec = long_pod(store, clock, "pod-a", exclusive=exclusive)
    quick = Recorder()
    engine.targets.register("quick", "long", quick, delivery_mode=ALO)
    rec.gate = asyncio.Event()
    await enqueue(engine, "report", [{"code": "nightly", "payload": 1}])
    first = a.long.start_batch(await a.long.reserve())
    await asyncio.wait_for(rec.entered.wait(), 10)
    await enqueue(engine, "report", [{"code": "nightly", "payload": 2}])
    await enqueue(engine, "quick", [{"payload": i} for i in range(3)])
    second = await a.long.reserve()
    assert sorted(r.target for r in second) == ["quick"] * 3
    await a.long.run_batch(second)
    assert len(quick.calls) == 3
    rec.gate.set()
    await asyncio.wait_for(first, 10)
    await settle()
    third = await a.long.reserve()
    assert [r.payload for r in third] == [2]


async def test_a_row_that_comes_due_while_the_lane_reads_its_timer_runs_at_once(
    store: Store, clock: FakeClock
) -> None:
    """The clock moves to a retry's due time while the lane is reading `next_due` (after
    its reserve found nothing due): the lane looks again at once instead of sleeping a
    safety poll (a lost wake-up, seen as a flaky scheduler test on PostgreSQL)."""
    engine, a, rec = long_pod(store, clock, "pod-a", safety_poll_s=60.0)
    later = clock.now() + timedelta(minutes=1)
    await enqueue(engine, "report", [{"payload": "later", "run_at": later}])
    read = store.queue.next_due

    async def next_due_as_the_clock_moves(*args: object, **kwargs: object) -> object:
        due = await read(*args, **kwargs)  # type: ignore[arg-type]
        if clock.now() < later:
            clock.set(later)  # the test's advance lands during the read
        return due

    store.queue.next_due = next_due_as_the_clock_moves  # type: ignore[method-assign]
    a.long.start()
    try:
        await until(lambda: len(rec.calls) == 1, timeout_s=5)
    finally:
        await a.long.stop()
        store.queue.next_due = read  # type: ignore[method-assign]


async def test_an_idle_lane_reads_its_timer_once_then_only_looks_each_safety_poll(
    store: Store, clock: FakeClock
) -> None:
    """An idle pod's long lane sends one statement per safety poll: the due
    time read after a wake-up holds until something wakes the lane again; a row whose
    wake-up was lost is still found by the next safety poll, and a wake-up reads the
    timer again, so a later row runs on its own timer."""
    engine, a, rec = long_pod(store, clock, "pod-a", safety_poll_s=10.0)
    calls = {"next_due": 0, "long_candidates": 0}
    originals = {name: getattr(store.queue, name) for name in calls}

    def counted(name: str) -> object:
        async def call(*args: object, **kwargs: object) -> object:
            calls[name] += 1
            return await originals[name](*args, **kwargs)

        return call

    for name in calls:
        setattr(store.queue, name, counted(name))
    sleeps = [0]
    sleep = clock.sleep

    async def counted_sleep(seconds: float) -> None:
        sleeps[0] += 1
        await sleep(seconds)

    clock.sleep = counted_sleep  # type: ignore[method-assign]

    async def next_poll(looks: int) -> None:
        await until(lambda: sleeps[0] == looks)  # the lane waits on its timer
        clock.advance(seconds=13)  # past the jittered poll (at most 12 s)
        await until(lambda: calls["long_candidates"] >= 1 + looks)

    a.long.start()
    try:
        for looks in range(1, 6):
            await next_poll(looks)
        await settle()
        assert calls == {"next_due": 1, "long_candidates": 6}
        await enqueue(engine, "report", [{"payload": "lost wake-up"}])  # nothing wakes
        await next_poll(6)
        await until(lambda: rec.payloads == ["lost wake-up"])
        later = clock.now() + timedelta(seconds=3)
        await enqueue(engine, "report", [{"payload": "timer", "run_at": later}])
        a.long.wake()  # as the feed does
        await until(lambda: calls["next_due"] >= 3)
        clock.set(later)
        await until(lambda: rec.payloads == ["lost wake-up", "timer"])
    finally:
        await a.long.stop()
        for name, original in originals.items():
            setattr(store.queue, name, original)
