"""The give-back write of a stopping pod, on every store: a RUNNING long-lane row whose
run the stop cut short, at-least-once, goes back PENDING through `Writes.apply` —
`JobRequeued{reason: stopped}`, claim and running code dropped, no attempt spent, due
now — so any pod's next reserve claims it at once. Like every write it is a
compare-and-set: a row that moved on since (its lease renewed, taken over) is left
alone.
"""

from __future__ import annotations

from jobledger.core.clock import FakeClock
from jobledger.domain import job_outcomes
from jobledger.domain.jobs import DeliveryMode, Job, JobStatus, Lane, Stamp
from jobledger.domain.timeutil import iso
from jobledger.engine import Engine
from jobledger.storage.port import Store
from tests.contract.helpers import _noop, _policy, claim, enqueue, renew

EXCLUSIVE_ALO = "schedule:alo"


async def _running(store: Store, engine: Engine, clock: FakeClock) -> Job:
    """A long-lane row of an exclusive at-least-once target that failed once, then was
    claimed: RUNNING with a running code, attempts 1."""
    engine.targets.register(
        EXCLUSIVE_ALO, Lane.LONG, _noop, exclusive=True, delivery_mode="at_least_once"
    )
    job = await enqueue(engine, EXCLUSIVE_ALO)
    failed = job_outcomes.decide_outcome(
        job,
        job_outcomes.RunResult(job_outcomes.Result.ANSWERED, error="boom"),
        _policy(),
        Stamp(clock.now()),
    )
    assert await store.writes.apply([failed.change]) == [True]
    assert isinstance(failed.change.row, Job)
    clock.advance(seconds=failed.change.row.next_run_at.timestamp() - clock.now().timestamp())
    claimed = claim(failed.change.row, clock, exclusive=True)
    assert await store.writes.apply([claimed]) == [True]
    row = await store.admin.get_job(job.id)
    assert row is not None and row.status == JobStatus.RUNNING and row.running_code
    return row


async def test_a_given_back_row_is_pending_due_now_and_keeps_its_attempts(
    store: Store, engine: Engine, clock: FakeClock
) -> None:
    running = await _running(store, engine, clock)
    clock.advance(seconds=30)  # the stop comes half a minute into the run
    now = clock.now()
    outcome = job_outcomes.stopped_while_running(running, DeliveryMode.AT_LEAST_ONCE, Stamp(now))
    assert outcome is not None
    assert await store.writes.apply([outcome.change]) == [True]

    row = await store.admin.get_job(running.id)
    assert row is not None and row == outcome.change.row
    assert row.status == JobStatus.PENDING
    assert row.attempts == running.attempts == 1
    assert row.next_run_at == now
    assert (row.claim_token, row.claimed_by, row.lease_until, row.running_code) == (
        None,
        None,
        None,
        None,
    )
    last = (await store.log.read_stream(running.stream))[-1]
    assert last.type == "JobRequeued"
    assert dict(last.data) == {
        "reason": "stopped",
        "token": running.claim_token,
        "next_run_at": iso(now),
    }
    # due at once for any pod; its exclusive code is free again
    assert [j.id for j in await store.queue.long_candidates(now, limit=10)] == [running.id]
    assert await store.queue.running_codes(now) == set()


async def test_a_give_back_loses_to_a_write_that_came_first(
    store: Store, engine: Engine, clock: FakeClock
) -> None:
    running = await _running(store, engine, clock)
    clock.advance(seconds=60)
    assert await store.writes.apply([renew(running, clock)]) == [True]  # the row moved on
    stale = job_outcomes.stopped_while_running(
        running, DeliveryMode.AT_LEAST_ONCE, Stamp(clock.now())
    )
    assert stale is not None
    assert await store.writes.apply([stale.change]) == [False]
    row = await store.admin.get_job(running.id)
    assert row is not None and row.status == JobStatus.RUNNING
    assert [e.type for e in await store.log.read_stream(running.stream)][-1] == "JobLeaseRenewed"
