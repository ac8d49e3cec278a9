"""`Writes.apply`: compare-and-set per stream, dedupe, lease guard, running_code.

A losing change is dropped on its own; the others of the same call still commit.
"""

from __future__ import annotations

from datetime import timedelta

from jobledger.core.clock import FakeClock
from jobledger.domain import job_outcomes
from jobledger.domain.chain import verify_chain
from jobledger.domain.jobs import Job, JobStatus, Lane, Stamp
from jobledger.engine import Engine
from jobledger.storage.port import LeaseGuard, Store
from tests.contract.helpers import (
    EXCLUSIVE,
    FAST,
    LONG,
    Subscriber,
    _policy,
    claim,
    dispatch,
    enqueue,
    kill,
    new_job,
    succeed,
)
from tests.stores import all_jobs


async def test_apply_writes_events_and_the_row_they_leave(store: Store, clock: FakeClock) -> None:
    change = new_job(clock, key="K", dedupe_key="d-1")
    assert await store.writes.apply([change]) == [True]
    job = await store.admin.get_job(change.stream.removeprefix("job:"))
    assert job is not None and job == change.row
    clock.advance(seconds=5)
    dispatched = dispatch(job, clock)
    assert await store.writes.apply([dispatched]) == [True]
    assert await store.admin.get_job(job.id) == dispatched.row
    assert [e.type for e in await store.log.read_stream(job.stream)] == [
        "JobEnqueued",
        "JobDispatched",
    ]


async def test_stale_expected_version_is_dropped_alone(
    store: Store, engine: Engine, clock: FakeClock
) -> None:
    a = await enqueue(engine, FAST, dedupe_key="a")
    b = await enqueue(engine, FAST, dedupe_key="b")
    winner, loser = dispatch(a, clock, pod="p1"), dispatch(a, clock, pod="p2")
    fresh = dispatch(b, clock)
    assert await store.writes.apply([winner, loser, fresh]) == [True, False, True]
    row_a = await store.admin.get_job(a.id)
    assert row_a is not None and row_a.claimed_by == "p1" and row_a.stream_version == 2
    assert await store.writes.apply([dispatch(a, clock, pod="p3")]) == [
        False
    ]  # built from v1 again
    assert len(await store.log.read_stream(a.stream)) == 2
    row_b = await store.admin.get_job(b.id)
    assert row_b == fresh.row


async def test_a_new_stream_loses_when_its_dedupe_key_is_in_the_log(
    store: Store, clock: FakeClock
) -> None:
    first = new_job(clock, dedupe_key="d-1")
    same_call = new_job(clock, dedupe_key="d-1")
    other = new_job(clock, dedupe_key="d-2")
    assert await store.writes.apply([first, same_call, other]) == [True, False, True]
    later = new_job(clock, dedupe_key="d-1")
    assert await store.writes.apply([later]) == [False]
    assert sorted(j.dedupe_key for j in await all_jobs(store)) == ["d-1", "d-2"]
    assert len(await store.log.read_log(0, limit=10)) == 2


async def test_a_finished_stream_cannot_be_written_again(
    store: Store, engine: Engine, clock: FakeClock
) -> None:
    job = await enqueue(engine, FAST, dedupe_key="d-1")
    stale = dispatch(job, clock)  # computed from v1, before the row left
    assert await store.writes.apply([succeed(job, clock)]) == [True]
    assert await store.admin.get_job(job.id) is None
    assert await store.writes.apply([stale]) == [False]
    # "expected version 0" on a stream that has events loses too, whatever its dedupe key
    reborn = new_job(clock, job_id=job.id, dedupe_key="another-key")
    assert await store.writes.apply([reborn]) == [False]
    assert await store.admin.get_job(job.id) is None
    assert [e.type for e in await store.log.read_stream(job.stream)] == [
        "JobEnqueued",
        "JobSucceeded",
    ]


async def test_apply_without_changes_is_a_no_op(store: Store) -> None:
    assert await store.writes.apply([]) == []


# --- the lease guard (fast lane in-flight marks) --------------------------------------------


async def test_lease_guard_applies_only_for_the_live_owner(
    seeded: Store, engine: Engine, clock: FakeClock
) -> None:
    store = seeded
    job = await enqueue(engine, FAST, key="K", dedupe_key="d-1")
    now = clock.now()
    assert await store.coordination.take_partition(
        job.partition, "pod-a", now, now + timedelta(seconds=30)
    )

    other_owner = LeaseGuard("pod-b", now)
    assert await store.writes.apply([dispatch(job, clock, pod="pod-b")], guard=other_owner) == [
        False
    ]
    expired = LeaseGuard("pod-a", now + timedelta(seconds=30))
    assert await store.writes.apply([dispatch(job, clock)], guard=expired) == [False]
    assert await store.admin.get_job(job.id) == job

    held = LeaseGuard("pod-a", now + timedelta(seconds=29))
    mark = dispatch(job, clock)
    assert await store.writes.apply([mark], guard=held) == [True]
    assert await store.admin.get_job(job.id) == mark.row


async def test_a_guarded_mark_alone_appends_its_event_and_refuses_a_stale_version(
    seeded: Store, engine: Engine, clock: FakeClock
) -> None:
    """A mark applied alone under the guard (PostgreSQL: its own lean statement) leaves
    the row and the log as the batch would; a second mark computed from the same old
    row loses the compare-and-set and appends nothing; the wake-up names the partition."""
    store = seeded
    job = await enqueue(engine, FAST, key="K", dedupe_key="d-m")
    now = clock.now()
    assert await store.coordination.take_partition(
        job.partition, "pod-a", now, now + timedelta(seconds=30)
    )
    sub = await Subscriber(store).start()
    try:
        mark = dispatch(job, clock)
        assert await store.writes.apply([mark], guard=LeaseGuard("pod-a", now)) == [True]
        wake = await sub.wake()
        assert wake.partitions is None or job.partition in wake.partitions
    finally:
        await sub.close()
    assert await store.admin.get_job(job.id) == mark.row
    stale = dispatch(job, clock)
    assert await store.writes.apply([stale], guard=LeaseGuard("pod-a", now)) == [False]
    assert await store.admin.get_job(job.id) == mark.row
    log = await store.log.read_stream(f"job:{job.id}")
    assert log[-1] == mark.events[0] and len(log) == 2
    assert verify_chain(log) == []


async def test_lease_guard_drops_only_the_changes_of_unheld_partitions(
    seeded: Store, engine: Engine, clock: FakeClock
) -> None:
    store = seeded
    jobs_by_partition: dict[int, Job] = {}
    n = 0
    while len(jobs_by_partition) < 2:
        job = await enqueue(engine, FAST, key=f"K{n}", dedupe_key=f"d-{n}")
        jobs_by_partition.setdefault(job.partition, job)
        n += 1
    mine, theirs = jobs_by_partition.values()
    now = clock.now()
    assert await store.coordination.take_partition(
        mine.partition, "pod-a", now, now + timedelta(seconds=30)
    )
    assert await store.coordination.take_partition(
        theirs.partition, "pod-b", now, now + timedelta(seconds=30)
    )
    flags = await store.writes.apply(
        [dispatch(mine, clock), dispatch(theirs, clock)], guard=LeaseGuard("pod-a", now)
    )
    assert flags == [True, False]


# --- running_code: one RUNNING row per exclusive code -------------------------------------


async def test_running_code_is_unique_among_running_rows(
    store: Store, engine: Engine, clock: FakeClock
) -> None:
    first = await enqueue(engine, EXCLUSIVE, dedupe_key="nightly:1")
    second = await enqueue(engine, EXCLUSIVE, dedupe_key="nightly:2")
    plain = await enqueue(engine, LONG, dedupe_key="plain")
    c1 = claim(first, clock, exclusive=True)
    c2 = claim(second, clock, pod="pod-b", exclusive=True)
    assert await store.writes.apply([c1, c2, claim(plain, clock)]) == [True, False, True]
    row2 = await store.admin.get_job(second.id)
    assert row2 is not None and row2.status == JobStatus.PENDING

    # even with its lease expired, a RUNNING row keeps its code until it leaves RUNNING
    clock.advance(minutes=10)
    assert await store.writes.apply([claim(second, clock, exclusive=True)]) == [False]

    running = await store.admin.get_job(first.id)
    assert running is not None and running.running_code == EXCLUSIVE
    assert await store.writes.apply([succeed(running, clock)]) == [True]
    assert await store.writes.apply([claim(second, clock, exclusive=True)]) == [True]


async def test_reclaiming_the_same_row_under_its_own_code_is_allowed(
    store: Store, engine: Engine, clock: FakeClock
) -> None:
    job = await enqueue(engine, EXCLUSIVE, dedupe_key="nightly:1")
    assert await store.writes.apply([claim(job, clock, exclusive=True)]) == [True]
    running = await store.admin.get_job(job.id)
    assert running is not None
    clock.advance(minutes=6)
    again = claim(running, clock, pod="pod-b", exclusive=True)
    assert await store.writes.apply([again]) == [True]
    row = await store.admin.get_job(job.id)
    assert row is not None and row.claimed_by == "pod-b" and row.status == JobStatus.RUNNING


async def test_dead_rows_stay_and_keep_their_fields(
    store: Store, engine: Engine, clock: FakeClock
) -> None:
    job = await enqueue(engine, LONG, {"x": [1, "two", None]}, headers={"h": "v"}, dedupe_key="d")
    dead = kill(job, clock)
    assert await store.writes.apply([dead]) == [True]
    row = await store.admin.get_job(job.id)
    assert row == dead.row
    assert row is not None and row.status == JobStatus.DEAD and row.lane == Lane.LONG
    assert row.closed_at == clock.now() and row.headers == {"h": "v"}


async def test_a_handler_error_no_store_could_hold_is_written_with_replacement_characters(
    store: Store, engine: Engine, clock: FakeClock
) -> None:
    """A NUL (PostgreSQL refused it) and a lone surrogate (every driver refused it, e.g.
    a filename decoded with surrogateescape) in a handler's error: the outcome could
    not be written, so an at-least-once job reran again and again with no record."""
    job = await enqueue(engine, LONG, dedupe_key="d")
    run = job_outcomes.RunResult(job_outcomes.Result.DEAD_NOW, error="no \x00 file b'\udc80'")
    dead = job_outcomes.decide_outcome(job, run, _policy(), Stamp(clock.now())).change
    assert await store.writes.apply([dead]) == [True]
    row = await store.admin.get_job(job.id)
    assert row is not None and row.last_error == "no \ufffd file b'\ufffd'"
    (_, last) = await store.log.read_stream(job.stream)
    assert last.data["error"] == "no \ufffd file b'\ufffd'"
