"""Job admin commands: detail with history, retry, skip, cancel (the listing is
`jobledger.http.queries.open_jobs`).

Thin over the pure core: read the row, let `domain.jobs` decide (it raises
InvalidStatus for a row in the wrong state), then `store.writes.apply` the change under its
compare-and-set. A change that loses the race to a lane or another admin is reported
as InvalidStatus (409), exactly like a row in the wrong state. The actor and trace id
come from the request context (`jobledger.core.context.request_context`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from jobledger.core import context
from jobledger.core.clock import Clock
from jobledger.core.ids import is_job_id
from jobledger.domain import job_commands, jobs
from jobledger.domain.errors import InvalidStatus, NotFound
from jobledger.domain.events import Event, EventType
from jobledger.domain.failures import attempt_history
from jobledger.domain.jobs import Change, Job, JobStatus, Stamp
from jobledger.storage.port import JobFilter, Store

#: how a job that left the queue ended, by the event that closed it
CLOSED_STATUS = {
    EventType.JOB_SUCCEEDED: "SUCCEEDED",
    EventType.JOB_SKIPPED: "SKIPPED",
    EventType.JOB_CANCELLED: "CANCELLED",
    EventType.JOB_EXPIRED: "EXPIRED",
}


#: DEAD rows one bulk call acts on at most (call again for the rest)
BULK_LIMIT = 10_000
#: rows read and written per round trip of a bulk call
BULK_BATCH = 500
BULK_COMMANDS: dict[str, Callable[[Job, Stamp], Change]] = {
    "retry": job_commands.retry,
    "skip": job_commands.skip,
}


@dataclass(frozen=True, slots=True)
class BulkResult:
    """What a bulk retry or skip did: `matched` DEAD rows found, `changed` of them
    retried or skipped, `conflicts` that changed meanwhile (a lane or another admin won
    the compare-and-set), `more` when it stopped at the limit with DEAD rows left."""

    action: str
    matched: int
    changed: int
    conflicts: int
    more: bool


@dataclass(frozen=True, slots=True)
class JobDetail:
    """A job and its whole stream.

    `job` is the open row, or — once the job left the queue — the row as it was just
    before the closing event (its attempts counting the run that closed it); `status`
    is the row's status or how it ended (SUCCEEDED, SKIPPED, CANCELLED, EXPIRED).
    `attempts` is its runs read from the stream (`domain.failures.attempt_history`:
    the newest `MAX_HISTORY`, oldest first).
    """

    job: Job
    status: str
    open: bool
    history: list[Event]
    attempts: list[dict[str, Any]]


class JobAdmin:
    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock

    def _stamp(self) -> Stamp:
        ctx = context.current()
        return Stamp(self.clock.now(), ctx.actor, ctx.trace_id)

    async def _row(self, job_id: str) -> Job:
        job = await self.store.admin.get_job(job_id) if is_job_id(job_id) else None
        if job is None:
            raise NotFound(f"job {job_id} not found")
        return job

    async def detail(self, job_id: str) -> JobDetail:
        if not is_job_id(job_id):
            raise NotFound(f"job {job_id} not found")
        history = await self.store.log.read_stream(jobs.job_stream(job_id))
        if not history:
            raise NotFound(f"job {job_id} not found")
        row = jobs.fold(history)
        runs = attempt_history(history)
        if row is not None:
            return JobDetail(row, row.status.value, True, history, runs)
        # the closing event: the last one that is not a record of a late run
        end = len(history)
        while end > 1 and history[end - 1].type == EventType.JOB_REDELIVERED:
            end -= 1
        last = jobs.fold(history[: end - 1])
        if last is None:  # a stream cannot close before it opened
            raise NotFound(f"job {job_id} not found")
        closing = history[end - 1]
        status = CLOSED_STATUS.get(closing.type, "CLOSED")
        return JobDetail(jobs.runs_at_close(last, closing), status, False, history, runs)

    async def _write(self, change: Change, job: Job, what: str) -> Any:
        (applied,) = await self.store.writes.apply([change])
        if not applied:
            raise InvalidStatus(f"cannot {what} job {job.id}: it changed meanwhile, try again")
        return change.row

    async def retry(self, job_id: str) -> Job:
        """DEAD → PENDING, attempts 0, next run now."""
        job = await self._row(job_id)
        row: Job = await self._write(job_commands.retry(job, self._stamp()), job, "retry")
        return row

    async def skip(self, job_id: str) -> None:
        """DEAD → gone; the log keeps a JobSkipped with reason admin."""
        job = await self._row(job_id)
        await self._write(job_commands.skip(job, self._stamp()), job, "skip")

    async def cancel(self, job_id: str) -> None:
        """PENDING and not in flight → gone (RUNNING and in-flight rows are refused)."""
        job = await self._row(job_id)
        await self._write(job_commands.cancel(job, self._stamp()), job, "cancel")

    async def cancel_in(self, job_id: str, *, tx: Any) -> None:
        """`cancel` inside the caller's transaction `tx` (what `enqueue` takes): the
        JobCancelled goes in with the caller's writes, under the same compare-and-set, and
        is gone with them on a rollback. The row is read as committed; a change that
        loses (the row moved meanwhile) raises InvalidStatus and writes nothing, so the
        caller's transaction stays usable."""
        job = await self._row(job_id)
        (applied,) = await self.store.writes.append_in(
            tx, [job_commands.cancel(job, self._stamp())]
        )
        if not applied:
            raise InvalidStatus(f"cannot cancel job {job.id}: it changed meanwhile, try again")

    async def dead_count(self, flt: JobFilter, *, at_most: int) -> int:
        """DEAD rows matching `flt` (its status aside), counted up to `at_most`."""
        dead = replace(flt, status=JobStatus.DEAD)
        _, count = await self.store.admin.list_jobs(dead, offset=0, limit=0, count_limit=at_most)
        return count

    async def bulk(self, action: str, flt: JobFilter, *, limit: int = BULK_LIMIT) -> BulkResult:
        """Retry or skip (`action`) every DEAD row matching `flt` (its status aside), up
        to `limit` rows, newest first, `BULK_BATCH` rows per `store.writes.apply`.

        Each row's transition is its own event (JobRetried / JobSkipped) under the
        request's actor and one trace id, and its own compare-and-set: a row that moved
        meanwhile is counted in `conflicts`, never an error. Safe to repeat: a retried or
        skipped row is no longer DEAD, so a second call finds only what is DEAD now.
        """
        make = BULK_COMMANDS[action]
        dead = replace(flt, status=JobStatus.DEAD)
        stamp = self._stamp()
        before: str | None = None
        matched = changed = 0
        while matched < limit:
            rows, _ = await self.store.admin.list_jobs(
                dead, offset=0, limit=min(BULK_BATCH, limit - matched), before=before, count_limit=0
            )
            if not rows:
                break
            before = rows[-1].id
            matched += len(rows)
            changed += sum(await self.store.writes.apply([make(job, stamp) for job in rows]))
        more = False
        if matched >= limit and before is not None:
            left, _ = await self.store.admin.list_jobs(
                dead, offset=0, limit=1, before=before, count_limit=0
            )
            more = bool(left)
        return BulkResult(action, matched, changed, matched - changed, more)
