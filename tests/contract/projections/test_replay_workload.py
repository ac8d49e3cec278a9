"""A workload for the audit tests: many jobs driven through every kind of transition.

Jobs are enqueued through the Engine in big `enqueue_many` transactions, then moved
by the pure domain commands in rounds; each round's changes go to `store.writes.apply` in big
batches. Scripts (by job number mod 8), with the events each writes after JobEnqueued:

    0 fast  dispatch, ok                                        → gone
    1 fast  answered, answered, ok                              → gone
    2 long  claim, renew, answered, claim, dead_now, retry, claim, ok → gone
    3 fast  cancel                                              → gone
    4 fast  unreachable, dead_now, skip                         → gone
    5 fast  dispatch, take_over (at-least-once), dispatch, unknown (at-most-once) → DEAD
    6 long  claim, reclaim (at-least-once), renew               → RUNNING
    7 fast  (nothing)                                           → PENDING

That is 4 events per job on average. This module has no tests of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta

from jobledger.core.clock import FakeClock
from jobledger.domain import job_commands, job_outcomes
from jobledger.domain.job_outcomes import OutcomePolicy, Result, RunResult
from jobledger.domain.jobs import Change, DeliveryMode, Job, JobStatus, NewJob, Stamp
from jobledger.engine import Engine
from jobledger.storage.port import Store
from tests.stores import all_jobs

FAST = "audit:fast"
LONG = "audit:long"
LEASE = timedelta(minutes=5)
AMO = OutcomePolicy(DeliveryMode.AT_MOST_ONCE, 6, (1, 2, 4, 8, 16))
ALO = OutcomePolicy(DeliveryMode.AT_LEAST_ONCE, 6, (1, 2, 4, 8, 16))

Step = Callable[[Job, Stamp], Change]


async def _noop(job: Job) -> None:
    return None


def engine_for(store: Store, clock: FakeClock) -> Engine:
    engine = Engine(store, clock=clock)
    engine.targets.register(FAST, "fast", _noop)
    engine.targets.register(LONG, "long", _noop)
    return engine


def _run(result: Result, policy: OutcomePolicy = AMO, error: str | None = None) -> Step:
    def step(job: Job, stamp: Stamp) -> Change:
        return job_outcomes.decide_outcome(job, RunResult(result, error), policy, stamp).change

    return step


def _dispatch(job: Job, stamp: Stamp) -> Change:
    return job_commands.dispatch(job, token=f"t{job.stream_version}", pod="pod-a", stamp=stamp)


def _claim(job: Job, stamp: Stamp) -> Change:
    return job_commands.claim(
        job, token=f"c{job.stream_version}", pod="pod-b", lease=LEASE, exclusive=False, stamp=stamp
    )


def _renew(job: Job, stamp: Stamp) -> Change:
    return job_commands.renew_lease(job, lease=LEASE, stamp=stamp)


def _take_over(job: Job, stamp: Stamp) -> Change:
    return job_outcomes.take_over(job, DeliveryMode.AT_LEAST_ONCE, stamp).change


def _reclaim(job: Job, stamp: Stamp) -> Change:
    return job_outcomes.reclaim_expired(
        job,
        DeliveryMode.AT_LEAST_ONCE,
        token="r",
        pod="pod-c",
        lease=LEASE,
        exclusive=False,
        stamp=stamp,
    ).change


SCRIPTS: list[tuple[str, list[Step]]] = [
    (FAST, [_dispatch, _run(Result.OK)]),
    (
        FAST,
        [_run(Result.ANSWERED, error="boom"), _run(Result.ANSWERED, error="boom"), _run(Result.OK)],
    ),
    (
        LONG,
        [
            _claim,
            _renew,
            _run(Result.ANSWERED, error="no"),
            _claim,
            _run(Result.DEAD_NOW, error="never"),
            job_commands.retry,
            _claim,
            _run(Result.OK),
        ],
    ),
    (FAST, [job_commands.cancel]),
    (FAST, [_run(Result.UNREACHABLE, error="down"), _run(Result.DEAD_NOW), job_commands.skip]),
    (FAST, [_dispatch, _take_over, _dispatch, _run(Result.UNKNOWN, error="lost")]),
    (LONG, [_claim, _reclaim, _renew]),
    (FAST, []),
]
EVENTS_PER_CYCLE = sum(1 + len(steps) for _, steps in SCRIPTS)  # 32 per 8 jobs


@dataclass
class Workload:
    jobs: int
    events: int
    open_rows: dict[str, Job]


async def generate(
    store: Store,
    clock: FakeClock,
    *,
    jobs_count: int,
    batch: int = 5000,
    first: int = 0,
    after_round: Callable[[int], object] | None = None,
) -> Workload:
    """Enqueue `jobs_count` jobs (numbered from `first`) and run every script to its end.

    Only the jobs of this call are moved; rows left open by an earlier call stay as
    they are. `after_round(n)` (sync or async) runs after each round's batches.
    """
    engine = engine_for(store, clock)
    number: dict[str, int] = {}
    for start in range(first, first + jobs_count, batch):
        items = [
            NewJob(
                target=SCRIPTS[n % len(SCRIPTS)][0],
                payload={"n": n},
                code=f"code{n % 3}",
                key=f"key{n % 101}",
                version=n,
                dedupe_key=f"audit:{n}",
            )
            for n in range(start, min(start + batch, first + jobs_count))
        ]
        async with engine.transaction() as tx:
            results = await engine.enqueue_many(items, tx=tx)
        for item, result in zip(items, results, strict=True):
            assert result.inserted and result.job_id
            number[result.job_id] = item.payload["n"]
    rows = {j.id: j for j in await all_jobs(store) if j.id in number}
    assert len(rows) == jobs_count
    events = jobs_count
    longest = max(len(steps) for _, steps in SCRIPTS)
    for round_no in range(longest):
        clock.advance(minutes=1)
        stamp = Stamp(clock.now(), None, f"trace-round-{round_no}")
        changes: list[Change] = []
        for job_id, job in rows.items():
            steps = SCRIPTS[number[job_id] % len(SCRIPTS)][1]
            if round_no < len(steps):
                changes.append(steps[round_no](job, stamp))
        for start in range(0, len(changes), batch):
            chunk = changes[start : start + batch]
            flags = await store.writes.apply(chunk)
            assert all(flags), "a workload change lost its compare-and-set"
            for change in chunk:
                events += len(change.events)
                job_id = change.stream.removeprefix("job:")
                if change.row is None:
                    del rows[job_id]
                else:
                    rows[job_id] = change.row
        if after_round is not None:
            returned = after_round(round_no)
            if hasattr(returned, "__await__"):
                await returned
    return Workload(jobs_count, events, rows)


@dataclass(frozen=True)
class Tampered:
    """What `tamper_job_rows` did to the jobs read model."""

    edited: set[str]  # rows whose attempts and last error were changed
    dropped: set[str]  # rows removed
    ghosts: list[Job]  # rows no stream explains


async def tamper_job_rows(store: Store, clock: FakeClock, ghost_ids: str) -> Tampered:
    """`generate` 48 jobs, then damage the live jobs rows: two edited (a DEAD and a
    PENDING one), two dropped (a RUNNING and a PENDING one), and one ghost per character
    of `ghost_ids` (its id that character 32 times: before, between or after the real
    ids). What a replay must report, page by page, as the whole comparison does."""
    await generate(store, clock, jobs_count=48)
    live = await all_jobs(store)
    by_status = {status: [j for j in live if j.status == status] for status in JobStatus}
    edited = {by_status[JobStatus.DEAD][0].id, by_status[JobStatus.PENDING][1].id}
    dropped = {by_status[JobStatus.RUNNING][0].id, by_status[JobStatus.PENDING][0].id}
    pending = by_status[JobStatus.PENDING][2]
    ghosts = [replace(pending, id=c * 32, dedupe_key=f"ghost{c}") for c in ghost_ids]
    tampered = [
        replace(j, attempts=j.attempts + 1, last_error="edited") if j.id in edited else j
        for j in live
        if j.id not in dropped
    ] + ghosts
    await store.projections.replace_read_models(tampered, await store.admin.list_schedules())
    return Tampered(edited, dropped, ghosts)
