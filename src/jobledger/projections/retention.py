"""DEAD retention (closes reference gap G3's missing DEAD TTL).

A DEAD row stays in the queue until an admin retries or skips it. Once it has been
DEAD longer than `Settings.dead_retention_days` (judged by `closed_at`, the time of
its JobDead), `Retention` writes a JobExpired event through `domain.job_commands.expire`, and
the store removes the row in the same transaction. The job's history stays in the
log. Each expiry is a compare-and-set on the stream's version, so a retry that races
with retention wins or loses cleanly, and several pods may run retention at once.

`run_once(now)` does one sweep; `await start()` runs a sweep every `interval_s` (an
hour by default) on the injected clock, and `await stop()` ends it — the runtime's
reactor protocol, so `Runtime(engine, reactors=[Retention.for_engine(engine)])` runs it.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from jobledger.config.settings import Settings
from jobledger.core.clock import Clock, SystemClock
from jobledger.core.context import new_trace_id
from jobledger.domain import job_commands
from jobledger.domain.events import SYSTEM
from jobledger.domain.jobs import Job, JobStatus, Stamp
from jobledger.projections.periodic import Periodic
from jobledger.storage.port import JobFilter, Store

if TYPE_CHECKING:
    from jobledger.engine import Engine

logger = logging.getLogger("jobledger.retention")

LIST_PAGE = 500
APPLY_BATCH = 500


def expired_rows(rows: list[Job], now: datetime, retention: timedelta) -> list[Job]:
    """DEAD rows whose `closed_at` is at least `retention` before `now`."""
    cutoff = now - retention
    return [
        j
        for j in rows
        if j.status == JobStatus.DEAD and j.closed_at is not None and j.closed_at <= cutoff
    ]


class Retention:
    def __init__(
        self,
        store: Store,
        *,
        clock: Clock | None = None,
        settings: Settings | None = None,
        interval_s: float = 3600.0,
    ) -> None:
        self.store = store
        self.clock: Clock = clock or SystemClock()
        self.settings = settings or Settings()
        self.interval_s = interval_s
        self.expired_total = 0
        self.periodic = Periodic("retention", self.run_once, self.clock, interval_s)

    @property
    def retention(self) -> timedelta:
        return timedelta(days=self.settings.dead_retention_days)

    async def _dead_rows(self) -> list[Job]:
        rows: list[Job] = []
        offset = 0
        while True:
            page, total = await self.store.admin.list_jobs(
                JobFilter(status=JobStatus.DEAD), offset=offset, limit=LIST_PAGE
            )
            rows.extend(page)
            offset += len(page)
            if not page or offset >= total:
                return rows

    async def run_once(self, now: datetime | None = None) -> int:
        """Expire every DEAD row past its retention; returns how many were expired."""
        now = now or self.clock.now()
        stamp = Stamp(now, SYSTEM, new_trace_id())
        due = expired_rows(await self._dead_rows(), now, self.retention)
        expired = 0
        for start in range(0, len(due), APPLY_BATCH):
            batch = due[start : start + APPLY_BATCH]
            changes = [job_commands.expire(job, stamp, self.retention) for job in batch]
            flags = await self.store.writes.apply(changes)
            expired += sum(flags)
        if expired:
            logger.info(
                "retention expired %d DEAD jobs closed before %s", expired, now - self.retention
            )
        self.expired_total += expired
        return expired

    @classmethod
    def for_engine(cls, engine: Engine, *, interval_s: float = 3600.0) -> Retention:
        """A retention reactor on the engine's store, clock and settings; pass it to
        `Runtime(engine, reactors=[...])`."""
        return cls(
            engine.store, clock=engine.clock, settings=engine.settings, interval_s=interval_s
        )

    @property
    def sweeps(self) -> int:
        """Sweeps the background loop finished since it started (failed ones included)."""
        return self.periodic.sweeps

    async def start(self) -> None:
        await self.periodic.start()

    async def stop(self) -> None:
        await self.periodic.stop()

    async def wait_for_sweeps(self, count: int) -> None:
        """Until the background loop has finished `count` sweeps since it started."""
        await self.periodic.wait_for_sweeps(count)
