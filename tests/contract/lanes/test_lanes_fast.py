"""Fast lane behaviour over every adapter: order, marks, leases, takeovers."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from jobledger.core.clock import FakeClock
from jobledger.domain import job_commands, jobs
from jobledger.domain.errors import DeadNow, TargetOutcomeUnknown, TargetUnreachable
from jobledger.domain.events import EventType
from jobledger.domain.jobs import DeliveryMode, JobStatus, Stamp
from jobledger.storage.port import Store
from tests.contract.lanes_kit import (
    Recorder,
    drain,
    enqueue,
    keys_in,
    make_engine,
    one_pod,
    pod,
)
from tests.stores import all_jobs

AMO = DeliveryMode.AT_MOST_ONCE
ALO = DeliveryMode.AT_LEAST_ONCE
P = 5


@pytest.mark.parametrize("mode", [ALO, AMO])
async def test_250_rows_go_in_pages_of_100_100_50(store: Store, clock: FakeClock, mode) -> None:
    engine, runtime, rec = await one_pod(store, clock, mode)
    assert len(runtime.leases.owned) == 64
    keys = keys_in(P, 250)
    await enqueue(engine, "kafka:t", [{"payload": i, "key": k} for i, k in enumerate(keys)])
    sizes = await drain(runtime, P)
    assert sorted(j.key for j in rec.calls) == keys
    # a page read while the round before it commits (read-ahead) may hold that round's
    # last row once more, as it was before the commit: taken out, never sent again
    pages = runtime.fast.stats.pages[:3]
    assert pages[:2] == [100, 100]
    assert pages[2] in (50, 51, 52)
    if mode == ALO:
        assert len(sizes) == 3 and sum(sizes) == 250 and sizes[0] == 100
    else:
        assert sizes == [1] * 250  # one at-most-once row at risk per partition
    assert await all_jobs(store) == []


@pytest.mark.parametrize("mode", [ALO, AMO])
async def test_a_key_cut_at_the_page_end_runs_once_in_order(
    store: Store, clock: FakeClock, mode: DeliveryMode
) -> None:
    """A full page ends with two of a key's five versions. The next page starts at that
    key again and may be read while the round's outcomes commit (read-ahead), seeing the
    two rows still queued: they are not sent again, and the key's versions go in order."""
    engine, runtime, rec = await one_pod(store, clock, mode)
    keys = keys_in(P, 99)
    cut = keys[-1]
    items: list[dict[str, object]] = [{"payload": k, "key": k} for k in keys[:-1]]
    items += [{"payload": f"v{v}", "key": cut, "version": v} for v in range(1, 6)]
    await enqueue(engine, "kafka:t", items)
    await drain(runtime, P)
    assert [j.payload for j in rec.calls if j.key == cut] == ["v1", "v2", "v3", "v4", "v5"]
    assert sorted(j.key for j in rec.calls if j.key != cut) == keys[:-1]
    assert await all_jobs(store) == []


async def test_at_most_once_has_one_row_in_flight_per_partition(
    store: Store, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    seen: list[int] = []

    async def handler(job: jobs.Job) -> None:
        inflight = await store.queue.inflight(job.partition)
        seen.append(len(inflight))
        assert [j.id for j in inflight] == [job.id]

    engine.targets.register("kafka:t", "fast", handler)
    runtime = pod(engine, "pod-a")
    await runtime.leases.start()
    await enqueue(engine, "kafka:t", [{"key": k} for k in keys_in(P, 12)])
    await drain(runtime, P)
    assert seen == [1] * 12


async def test_backoff_then_dead_at_the_sixth_failure(store: Store, clock: FakeClock) -> None:
    engine, runtime, rec = await one_pod(store, clock)
    rec.always = RuntimeError("rejected")
    (job_id,) = await enqueue(engine, "kafka:t", [{"key": keys_in(P, 1)[0]}])
    waits = []
    for attempt in range(1, 6):
        await drain(runtime, P)
        row = await store.admin.get_job(job_id)
        assert row is not None and row.attempts == attempt and row.status == JobStatus.PENDING
        waits.append((row.next_run_at - clock.now()).total_seconds() / 60)
        await drain(runtime, P)  # not due yet: nothing sent
        assert len(rec.calls) == attempt
        clock.set(row.next_run_at)
    assert waits == [1, 2, 4, 8, 16]
    await drain(runtime, P)
    row = await store.admin.get_job(job_id)
    assert row is not None and row.status == JobStatus.DEAD and row.attempts == 6
    assert row.closed_at == clock.now() and row.dead_reason == "max_attempts"


async def test_per_code_max_attempts(store: Store, clock: FakeClock, caplog) -> None:
    engine, runtime, rec = await one_pod(store, clock)
    engine.targets.set_max_attempts("do_update", 2)
    rec.always = RuntimeError("rejected")
    (job_id,) = await enqueue(engine, "kafka:t", [{"key": "a", "code": "do_update"}])
    p = (await store.admin.get_job(job_id)).partition  # type: ignore[union-attr]
    await drain(runtime, p)
    clock.advance(minutes=1)
    with caplog.at_level("ERROR", logger="jobledger.run"):
        await drain(runtime, p)
    row = await store.admin.get_job(job_id)
    assert row is not None and row.status == JobStatus.DEAD and row.attempts == 2
    assert any("job dead alert" in r.getMessage() for r in caplog.records)


async def test_failed_row_holds_later_versions_of_its_key(store: Store, clock: FakeClock) -> None:
    engine, runtime, rec = await one_pod(store, clock, ALO)
    k, other = keys_in(P, 2)
    rec.raises = [RuntimeError("no")]
    await enqueue(
        engine,
        "kafka:t",
        [
            {"key": k, "version": 1, "payload": "k1"},
            {"key": k, "version": 2, "payload": "k2"},
            {"key": k, "version": 3, "payload": "k3"},
            {"key": other, "version": 1, "payload": "o1"},
        ],
    )
    await drain(runtime, P)
    assert rec.payloads == ["k1", "o1"]  # k2, k3 held behind the retry; other key flows
    clock.advance(seconds=59)
    await drain(runtime, P)
    assert rec.payloads == ["k1", "o1"]
    clock.advance(seconds=1)
    await drain(runtime, P)
    assert rec.payloads == ["k1", "o1", "k1", "k2", "k3"]


async def test_versions_run_in_order_even_when_enqueued_backwards(
    store: Store, clock: FakeClock
) -> None:
    engine, runtime, rec = await one_pod(store, clock, ALO)
    k = keys_in(P, 1)[0]
    await enqueue(engine, "kafka:t", [{"key": k, "version": v, "payload": v} for v in (3, 1, 2)])
    await drain(runtime, P)
    assert rec.payloads == [1, 2, 3]


async def test_dead_row_holds_nothing(store: Store, clock: FakeClock) -> None:
    engine, runtime, rec = await one_pod(store, clock)
    k = keys_in(P, 1)[0]
    rec.raises = [DeadNow("invalid record")]
    ids = await enqueue(engine, "kafka:t", [{"key": k, "version": v, "payload": v} for v in (1, 2)])
    await drain(runtime, P)
    assert rec.payloads == [1, 2]
    dead = await store.admin.get_job(ids[0])
    assert dead is not None and dead.status == JobStatus.DEAD and dead.dead_reason == "dead_now"
    assert await store.admin.get_job(ids[1]) is None
    assert not runtime.pauses.is_paused("kafka:t")  # dead_now leaves pause state as is


async def test_success_leaves_the_queue_but_its_events_stay(store: Store, clock: FakeClock) -> None:
    engine, runtime, _ = await one_pod(store, clock)
    (job_id,) = await enqueue(engine, "kafka:t", [{"key": "a", "payload": {"x": 1}}])
    p = (await store.admin.get_job(job_id)).partition  # type: ignore[union-attr]
    await drain(runtime, p)
    assert await store.admin.get_job(job_id) is None
    types = [e.type for e in await store.log.read_stream(f"job:{job_id}")]
    assert types == [EventType.JOB_ENQUEUED, EventType.JOB_DISPATCHED, EventType.JOB_SUCCEEDED]


async def test_unreachable_target_paused_for_two_days(store: Store, clock: FakeClock) -> None:
    engine, runtime, rec = await one_pod(store, clock)
    other = Recorder()
    engine.targets.register("kafka:up", "fast", other, delivery_mode=ALO)
    rec.always = TargetUnreachable("connection refused")
    keys = keys_in(P, 3)
    ids = await enqueue(engine, "kafka:t", [{"key": k, "payload": k} for k in keys])
    await drain(runtime, P)
    assert len(rec.calls) == 1 and runtime.pauses.is_paused("kafka:t")
    # five minutes in 10 s steps: one probe per 30 s interval, others keep running
    for i in range(30):
        clock.advance(seconds=10)
        await enqueue(engine, "kafka:up", [{"key": keys[0], "payload": i}])
        await drain(runtime, P)
    assert len(rec.calls) == 1 + 10
    assert len(other.calls) == 30
    # the rest of two days in one-hour jumps: one probe each
    for _ in range(47):
        clock.advance(hours=1)
        await drain(runtime, P)
    assert len(rec.calls) == 1 + 10 + 47
    for job_id in ids:
        row = await store.admin.get_job(job_id)
        assert row is not None and row.status == JobStatus.PENDING and row.attempts == 0
    # the broker is back: the next probe succeeds and the backlog drains in key order
    rec.always = None
    rec.calls.clear()
    clock.advance(seconds=30)
    await drain(runtime, P)
    assert rec.payloads == keys
    assert not runtime.pauses.is_paused("kafka:t")


@pytest.mark.parametrize("target_up", [False, True])
async def test_outcome_unknown_at_most_once_is_dead(
    store: Store, clock: FakeClock, target_up
) -> None:
    engine, runtime, rec = await one_pod(store, clock)
    rec.raises = [TargetOutcomeUnknown("send timed out", target_up=target_up)]
    (job_id,) = await enqueue(engine, "kafka:t", [{"key": keys_in(P, 1)[0]}])
    await drain(runtime, P)
    row = await store.admin.get_job(job_id)
    assert row is not None and row.status == JobStatus.DEAD and row.dead_reason == "outcome_unknown"
    assert runtime.pauses.is_paused("kafka:t") is (not target_up)


async def test_outcome_unknown_at_least_once_is_deferred(store: Store, clock: FakeClock) -> None:
    engine, runtime, rec = await one_pod(store, clock, ALO)
    rec.raises = [TargetOutcomeUnknown("timed out", target_up=True)]
    (job_id,) = await enqueue(engine, "kafka:t", [{"key": keys_in(P, 1)[0]}])
    await drain(runtime, P)
    row = await store.admin.get_job(job_id)
    assert row is not None and row.status == JobStatus.PENDING and row.attempts == 0
    assert runtime.pauses.is_paused("kafka:t")
    clock.advance(seconds=30)
    await drain(runtime, P)
    assert await store.admin.get_job(job_id) is None and len(rec.calls) == 2


async def test_stalled_pod_sends_nothing_after_its_lease(store: Store, clock: FakeClock) -> None:
    engine_a, a, rec_a = await one_pod(store, clock)
    engine_b = make_engine(store, clock)
    rec_b = Recorder()
    engine_b.targets.register("kafka:t", "fast", rec_b)
    b = pod(engine_b, "pod-b")
    await enqueue(engine_a, "kafka:t", [{"key": k} for k in keys_in(P, 3)])
    clock.advance(seconds=31)  # pod-a stalled past its lease
    await b.leases.start()
    assert P in b.leases.owned
    assert await drain(a, P, tick=False) == []
    assert rec_a.calls == []
    await drain(b, P)
    assert len(rec_b.calls) == 3


async def test_lost_lease_refuses_the_mark_and_sends_nothing(
    store: Store, clock: FakeClock
) -> None:
    engine_a, a, rec_a = await one_pod(store, clock)
    engine_b = make_engine(store, clock)
    engine_b.targets.register("kafka:t", "fast", Recorder())
    await enqueue(engine_a, "kafka:t", [{"key": k} for k in keys_in(P, 2)])
    await store.coordination.release_partitions("pod-a", [P])  # lease gone, pod-a's clock disagrees
    assert await store.coordination.take_partition(
        P, "pod-b", clock.now(), clock.now() + timedelta(seconds=30)
    )
    assert await drain(a, P, tick=False) in ([], [0])
    assert rec_a.calls == []
    assert a.fast.workers[P].lost
    assert await store.queue.inflight(P) == []


async def _die_mid_send(runtime, rec: Recorder, partition: int) -> asyncio.Task:
    rec.gate = asyncio.Event()
    task = asyncio.create_task(runtime.fast.step(partition))
    await asyncio.wait_for(rec.entered.wait(), 10)
    task.cancel()  # the pod dies with the row in flight: no outcome is ever written
    with pytest.raises(asyncio.CancelledError):
        await task
    return task


async def test_takeover_at_most_once_row_in_flight_is_dead(store: Store, clock: FakeClock) -> None:
    engine_a, a, rec_a = await one_pod(store, clock)
    k1, k2 = keys_in(P, 2)
    ids = await enqueue(engine_a, "kafka:t", [{"key": k1}, {"key": k2}])
    await _die_mid_send(a, rec_a, P)
    engine_b = make_engine(store, clock)
    rec_b = Recorder()
    engine_b.targets.register("kafka:t", "fast", rec_b)
    b = pod(engine_b, "pod-b")
    clock.advance(seconds=31)
    await b.leases.start()
    dead = await store.admin.get_job(ids[0])
    assert dead is not None and dead.status == JobStatus.DEAD
    assert dead.dead_reason == "in flight when its partition was taken over"
    await drain(b, P)
    assert [j.id for j in rec_b.calls] == [ids[1]]  # the unsent row is not closed


async def test_a_dead_pods_mark_behind_a_page_of_delayed_rows_is_judged_first(
    store: Store, clock: FakeClock
) -> None:
    """The dead pod marked a row it found past a full page of delayed rows. The taker-over
    judges it DEAD when it takes the partition, before it sends anything: its handler
    sees one marked row in the partition, its own, and the key's next version goes after
    the verdict."""
    engine_a, a, rec_a = await one_pod(store, clock)
    *early, key = keys_in(P, 101)
    later = timedelta(hours=1)
    await enqueue(engine_a, "kafka:t", [{"key": k, "run_at": later} for k in early])
    marked, follower = await enqueue(
        engine_a, "kafka:t", [{"key": key, "version": 1}, {"key": key, "version": 2}]
    )
    await _die_mid_send(a, rec_a, P)
    assert [j.id for j in rec_a.calls] == [marked]
    assert a.fast.stats.pages[:2] == [100, 2]  # the mark was made on the second page

    engine_b = make_engine(store, clock)
    seen: list[list[str]] = []

    async def handler(job: jobs.Job) -> None:
        seen.append([j.id for j in await store.queue.inflight(job.partition)])

    engine_b.targets.register("kafka:t", "fast", handler)
    b = pod(engine_b, "pod-b")
    clock.advance(seconds=31)
    await b.leases.start()
    dead = await store.admin.get_job(marked)
    assert dead is not None and dead.status == JobStatus.DEAD
    assert dead.dead_reason == "in flight when its partition was taken over"
    assert await store.queue.inflight(P) == []
    await drain(b, P)
    assert seen == [[follower]]
    assert await store.admin.get_job(follower) is None


async def test_a_marked_row_no_takeover_judged_is_judged_when_its_page_is_read(
    store: Store, clock: FakeClock
) -> None:
    """A row marked by a run that is over, which the pod's takeover did not judge (it
    took the partition before the mark was written): the pass judges it DEAD when a
    page holds it, once, and the key's next version goes after it."""
    engine, runtime, rec = await one_pod(store, clock)
    (key,) = keys_in(P, 1)
    marked, follower = await enqueue(
        engine, "kafka:t", [{"key": key, "version": 1}, {"key": key, "version": 2}]
    )
    row = await store.admin.get_job(marked)
    assert row is not None
    gone = job_commands.dispatch(row, token="t1", pod="gone", stamp=Stamp(clock.now()))
    assert await store.writes.apply([gone]) == [True]
    await drain(runtime, P)
    dead = await store.admin.get_job(marked)
    assert dead is not None and dead.status == JobStatus.DEAD
    assert dead.dead_reason == "in flight when its partition was taken over"
    assert [j.id for j in rec.calls] == [follower]
    assert await store.admin.get_job(follower) is None


async def test_takeover_at_least_once_resends(store: Store, clock: FakeClock) -> None:
    engine_a, a, rec_a = await one_pod(store, clock, ALO)
    (job_id,) = await enqueue(engine_a, "kafka:t", [{"key": keys_in(P, 1)[0]}])
    await _die_mid_send(a, rec_a, P)
    engine_b = make_engine(store, clock)
    rec_b = Recorder()
    engine_b.targets.register("kafka:t", "fast", rec_b, delivery_mode=ALO)
    b = pod(engine_b, "pod-b")
    clock.advance(seconds=31)
    await b.leases.start()
    await drain(b, P)
    assert [j.id for j in rec_b.calls] == [job_id]
    assert await store.admin.get_job(job_id) is None


async def test_takeover_requeues_a_marked_at_least_once_row(store: Store, clock: FakeClock) -> None:
    engine, runtime, rec = await one_pod(store, clock, ALO)
    (job_id,) = await enqueue(engine, "kafka:t", [{"key": keys_in(P, 1)[0]}])
    row = await store.admin.get_job(job_id)
    assert row is not None
    # a previous owner marked it (say the target was at-most-once then) and died
    await store.writes.apply(
        [job_commands.dispatch(row, token="t1", pod="gone", stamp=Stamp(clock.now()))]
    )
    await runtime.fast.take_over([P])
    row = await store.admin.get_job(job_id)
    assert row is not None and row.inflight_token is None and row.status == JobStatus.PENDING
    events = [e.type for e in await store.log.read_stream(f"job:{job_id}")]
    assert events[-1] == EventType.JOB_REQUEUED
    await drain(runtime, P)
    assert len(rec.calls) == 1


async def test_row_closed_by_another_writer_is_not_sent(store: Store, clock: FakeClock) -> None:
    engine = make_engine(store, clock)
    sent: list[str] = []
    k1, k2, k3 = keys_in(P, 3)
    ids: list[str] = []

    async def handler(job: jobs.Job) -> None:
        sent.append(job.id)
        if job.id == ids[0]:  # while row 1 is out, row 2 is closed behind the pod's back
            other = await store.admin.get_job(ids[1])
            assert other is not None
            await store.writes.apply([job_commands.cancel(other, Stamp(clock.now()))])

    engine.targets.register("kafka:t", "fast", handler)
    runtime = pod(engine, "pod-a")
    await runtime.leases.start()
    ids.extend(await enqueue(engine, "kafka:t", [{"key": k} for k in (k1, k2, k3)]))
    await drain(runtime, P)
    assert sent == [ids[0], ids[2]]
    assert runtime.fast.stats.marks_refused == 1


async def test_three_pods_split_21_21_22(store: Store, clock: FakeClock) -> None:
    pods = [pod(make_engine(store, clock), f"pod-{i}") for i in range(3)]
    for p in pods:
        await p.leases.start()
    for _ in range(3):
        for p in pods:
            await p.leases.tick()
    counts = sorted(len(p.leases.owned) for p in pods)
    assert counts == [21, 21, 22]
    owners = [lease.owner for lease in await store.coordination.leases()]
    assert len(owners) == 64 and None not in owners
    held = [set(p.leases.owned) for p in pods]
    assert not (held[0] & held[1]) and not (held[1] & held[2]) and not (held[0] & held[2])


async def test_two_pods_split_32_32_and_a_leaver_hands_over(store: Store, clock: FakeClock) -> None:
    a = pod(make_engine(store, clock), "pod-a")
    b = pod(make_engine(store, clock), "pod-b")
    await a.leases.start()
    await b.leases.start()
    await a.leases.tick()
    await b.leases.tick()
    assert sorted([len(a.leases.owned), len(b.leases.owned)]) == [32, 32]
    await a.leases.release_all()
    assert "pod-a" not in await store.coordination.live_workers(clock.now() - timedelta(seconds=30))
    await b.leases.tick()
    assert len(b.leases.owned) == 64


async def test_seeding_race_leaves_64_rows(store: Store, clock: FakeClock) -> None:
    pods = [pod(make_engine(store, clock), f"pod-{i}") for i in range(3)]
    await asyncio.gather(*(p.leases.start() for p in pods))
    leases = await store.coordination.leases()
    assert [lease.partition for lease in leases] == list(range(64))
    total = sum(len(p.leases.owned) for p in pods)
    assert total == len({q for p in pods for q in p.leases.owned}) <= 64


async def test_busy_partition_is_never_released(store: Store, clock: FakeClock) -> None:
    engine_a, a, rec_a = await one_pod(store, clock)
    await enqueue(engine_a, "kafka:t", [{"key": keys_in(63, 1)[0]}])
    rec_a.gate = asyncio.Event()
    busy = asyncio.create_task(a.fast.step(63))
    await asyncio.wait_for(rec_a.entered.wait(), 10)
    b = pod(make_engine(store, clock), "pod-b")
    await b.leases.start()
    await a.leases.tick()
    assert len(a.leases.owned) == 32 and 63 in a.leases.owned
    rec_a.gate.set()
    assert await busy == 1
    assert await store.admin.get_job(rec_a.calls[0].id) is None
