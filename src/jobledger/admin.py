"""Job admin commands: detail with history, retry, skip, cancel (the listing is
`jobledger.http.listing`).

Thin over the pure core: read the row, let `domain.jobs` decide (it raises
InvalidStatus for a row in the wrong state), then `store.apply` the change under its
compare-and-set. A change that loses the race to a lane or another admin is reported
as InvalidStatus (409), exactly like a row in the wrong state. The actor and trace id
come from the request context (`jobledger.core.context.request_context`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobledger.core import context
from jobledger.core.clock import Clock
from jobledger.core.ids import is_job_id
from jobledger.domain import job_commands, jobs
from jobledger.domain.errors import InvalidStatus, NotFound
from jobledger.domain.events import Event, EventType
from jobledger.domain.jobs import Change, Job, Stamp
from jobledger.storage.port import Store

#: how a job that left the queue ended, by the event that closed it
CLOSED_STATUS = {
    EventType.JOB_SUCCEEDED: "SUCCEEDED",
    EventType.JOB_SKIPPED: "SKIPPED",
    EventType.JOB_CANCELLED: "CANCELLED",
    EventType.JOB_EXPIRED: "EXPIRED",
}


@dataclass(frozen=True, slots=True)
class JobDetail:
    """A job and its whole stream.

    `job` is the open row, or — once the job left the queue — the row as it was just
    before the closing event; `status` is the row's status or how it ended
    (SUCCEEDED, SKIPPED, CANCELLED, EXPIRED).
    """

    job: Job
    status: str
    open: bool
    history: list[Event]


class JobAdmin:
    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock

    def _stamp(self) -> Stamp:
        ctx = context.current()
        return Stamp(self.clock.now(), ctx.actor, ctx.trace_id)

    async def _row(self, job_id: str) -> Job:
        job = await self.store.get_job(job_id) if is_job_id(job_id) else None
        if job is None:
            raise NotFound(f"job {job_id} not found")
        return job

    async def detail(self, job_id: str) -> JobDetail:
        if not is_job_id(job_id):
            raise NotFound(f"job {job_id} not found")
        history = await self.store.read_stream(jobs.job_stream(job_id))
        if not history:
            raise NotFound(f"job {job_id} not found")
        row = jobs.fold(history)
        if row is not None:
            return JobDetail(row, row.status.value, True, history)
        # the closing event: the last one that is not a record of a late run
        end = len(history)
        while end > 1 and history[end - 1].type == EventType.JOB_REDELIVERED:
            end -= 1
        last = jobs.fold(history[: end - 1])
        if last is None:  # a stream cannot close before it opened
            raise NotFound(f"job {job_id} not found")
        closing = history[end - 1].type
        return JobDetail(last, CLOSED_STATUS.get(closing, "CLOSED"), False, history)

    async def _write(self, change: Change, job: Job, what: str) -> Any:
        (applied,) = await self.store.apply([change])
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
        """PENDING and not in flight → gone (closes G2)."""
        job = await self._row(job_id)
        await self._write(job_commands.cancel(job, self._stamp()), job, "cancel")
