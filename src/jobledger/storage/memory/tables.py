"""The memory store's database: the log, the read models, the coordination rows and the
queue's indexes, in dictionaries of one process. Every role of the store works on one
`MemoryTables`.

The queue reads go through indexes, as the real adapters' do: the job ids of each lane
(and fast-lane partition), and per partition the sorted (order key, version, id) of its
PENDING fast rows, so a partition worker's page costs a bisection and the page's rows,
not every row of its partition. A row that left the queue (succeeded, dead, running) is
dropped from that sorted list by the next page read that meets it, not by the write: a
write then costs no search of the list.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from jobledger.domain.events import Event
from jobledger.domain.jobs import Job, JobStatus, Lane
from jobledger.domain.schedules.row import Schedule
from jobledger.storage.port import LeaseGuard, PartitionLease

_PENDING = JobStatus.PENDING
_FAST = Lane.FAST


class MemoryTables:
    def __init__(self) -> None:
        # --- the log: events in position order, and the dedupe keys it holds -----------
        self.events: list[Event] = []
        self.last_position = 0
        self.versions: dict[str, int] = {}  # stream -> its version
        self.dedupe: dict[str, str] = {}  # dedupe key -> the stream that holds it
        # --- the inline read models --------------------------------------------------------
        self.jobs: dict[str, Job] = {}
        self.schedules: dict[str, Schedule] = {}
        # ids of the rows in `jobs`, by lane and fast-lane partition (insertion-ordered)
        self.fast_ids: dict[int, dict[str, None]] = {}
        self.long_ids: dict[str, None] = {}
        # per fast-lane partition, the sorted (order key, version, id) of its PENDING rows,
        # and of rows that left since (fast_pending drops those); the ids in these lists.
        # A job's lane, partition, key and version never change, nor therefore its entry
        self.queued: dict[int, list[tuple[str, int, str]]] = {}
        self.queued_ids: set[str] = set()
        # --- coordination rows, counters, checkpoints, business rows ------------------------
        self.leases: dict[int, PartitionLease] = {}
        self.workers: dict[str, datetime] = {}
        #: each pod's paused targets and since when, as its last heartbeat said them
        self.worker_pauses: dict[str, dict[str, datetime]] = {}
        self.counters: dict[str, int] = {}
        self.counter_locks: dict[str, asyncio.Lock] = {}  # a row lock's part, per key
        self.checkpoints: dict[str, tuple[int, Any]] = {}
        self.business: dict[str, list[Any]] = {}

    def holds(self, guard: LeaseGuard, partition: int) -> bool:
        lease = self.leases.get(partition)
        return bool(
            lease
            and lease.owner == guard.pod
            and lease.lease_until is not None
            and lease.lease_until > guard.now
        )

    def put_job(self, ident: str, row: Job | None) -> None:
        """Write (or, `row` None, remove) one job row, keeping the indexes in step."""
        if row is None:  # a job's lane and partition never change: only removal moves it
            old = self.jobs.pop(ident, None)
            if old is not None:
                del self._ids_of(old)[ident]
            return
        self.jobs[ident] = row
        self._ids_of(row)[ident] = None
        if row.status == _PENDING and row.lane == _FAST and ident not in self.queued_ids:
            self.queued_ids.add(ident)
            bisect.insort(self.queued.setdefault(row.partition, []), queue_key(row))

    def replace_jobs(self, jobs: Iterable[Job]) -> None:
        """Every job row and index anew, from `jobs`."""
        self.jobs = {}
        self.fast_ids = {}
        self.long_ids = {}
        self.queued = {}
        self.queued_ids = set()
        for job in jobs:
            self.put_job(job.id, job)

    def _ids_of(self, job: Job) -> dict[str, None]:
        """The index entry `job` belongs to: its fast-lane partition's, or the long lane's."""
        if job.lane == Lane.LONG:
            return self.long_ids
        return self.fast_ids.setdefault(job.partition, {})

    def rows(self, ids: Iterable[str]) -> Iterator[Job]:
        jobs = self.jobs
        return (jobs[ident] for ident in ids)

    def fast_rows(self, partitions: Iterable[int]) -> Iterator[Job]:
        for partition in partitions:
            yield from self.rows(self.fast_ids.get(partition, ()))


def queue_key(job: Job) -> tuple[str, int, str]:
    """A PENDING fast row's place in its partition's queue: (order key, version, id)."""
    return (job.order_key, job.version, job.id)
