"""An in-memory store: the unit-test fixture and the reference implementation of the port.

Everything lives in dictionaries of one process; a transaction stages its changes and
applies them on commit under the same compare-and-set rules as the real adapters, so
the contract suite holds for it too. The queue reads go through indexes, as the real
adapters' do: the job ids of each lane (and fast-lane partition), and per partition the
sorted (order key, version, id) of its PENDING fast rows, so a partition worker's page
costs a bisection and the page's rows, not every row of its partition. A row that left
the queue (succeeded, dead, running) is dropped from that sorted list by the next page
read that meets it, not by the write: a write then costs no search of the list.
"""

from __future__ import annotations

import asyncio
import bisect
import operator
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from jobledger.domain.events import Event
from jobledger.domain.jobs import Change, Job, JobStatus, Lane
from jobledger.domain.schedules.row import Schedule
from jobledger.storage.feed import LocalFeed, Subscription, wake_of
from jobledger.storage.memory.coordination import MemoryCoordination
from jobledger.storage.memory.log import MemoryLog
from jobledger.storage.port import (
    JobFilter,
    LeaseGuard,
    Store,
    Transaction,
    native_handle,
    run_after_commit,
)


@dataclass
class MemoryTx:
    """The native handle of a memory transaction: staged changes until commit."""

    store: MemoryStore
    staged: list[Change] = field(default_factory=list)
    business: dict[str, list[Any]] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)  # `next_version`, until commit
    held: list[asyncio.Lock] = field(default_factory=list)  # the counters' locks it holds
    done: bool = False

    def end(self) -> None:
        """Finished (committed or rolled back): its counters' locks go."""
        self.done = True
        for lock in self.held:
            lock.release()
        self.held.clear()

    def insert(self, table: str, row: Any) -> None:
        """Business code's own write (tests use it as "the business row")."""
        self.business.setdefault(table, []).append(row)


class MemoryStore(MemoryCoordination, MemoryLog, Store):
    """The port in dictionaries: writes and the queue here, leases and the log in mixins."""

    name = "memory"

    def __init__(self, partitions: int = 64) -> None:
        MemoryCoordination.__init__(self)
        MemoryLog.__init__(self)
        self.partitions = partitions
        self.jobs: dict[str, Job] = {}
        # ids of the rows in `jobs`, by lane and fast-lane partition (insertion-ordered)
        self._fast_ids: dict[int, dict[str, None]] = {}
        self._long_ids: dict[str, None] = {}
        # per fast-lane partition, the sorted (order key, version, id) of its PENDING rows,
        # and of rows that left since (fast_pending drops those); the ids in these lists.
        # A job's lane, partition, key and version never change, nor therefore its entry
        self._queued: dict[int, list[tuple[str, int, str]]] = {}
        self._queued_ids: set[str] = set()
        self.schedules: dict[str, Schedule] = {}
        self.versions: dict[str, int] = {}
        self.business: dict[str, list[Any]] = {}
        self.counters: dict[str, int] = {}
        self._counter_locks: dict[str, asyncio.Lock] = {}  # a row lock's part, per key
        self._feed = LocalFeed()
        self._lock = asyncio.Lock()

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        self._feed.close()

    # --- writes --------------------------------------------------------------------------
    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        tx = Transaction(MemoryTx(self))
        try:
            yield tx
        except BaseException:
            tx.native.end()
            raise
        self.commit(tx.native)
        run_after_commit(tx)

    def commit(self, native: MemoryTx) -> None:
        if native.done:
            raise RuntimeError("transaction already finished")
        self.counters.update(native.counters)
        native.end()
        applied = [
            change
            for change, ok in zip(native.staged, self._apply_all(native.staged), strict=True)
            if ok
        ]
        for table, rows in native.business.items():
            self.business.setdefault(table, []).extend(rows)
        self._notify(applied)

    async def append_in(self, tx: Any, changes: Sequence[Change]) -> list[bool]:
        native = self._own(tx)
        staged_keys = {c.dedupe_key for c in native.staged if c.dedupe_key}
        flags = []
        for change in changes:
            seen = change.dedupe_key in self.dedupe or change.dedupe_key in staged_keys
            if not seen:
                native.staged.append(change)
                if change.dedupe_key:
                    staged_keys.add(change.dedupe_key)
            flags.append(not seen)
        return flags

    async def next_version(self, tx: Any, key: str) -> int:
        native = self._own(tx)
        if native.done:
            raise TypeError("the memory store takes a MemoryTx of its own, still open")
        if key not in native.counters:  # first ask in this transaction: take the key's lock
            lock = self._counter_locks.setdefault(key, asyncio.Lock())
            await lock.acquire()
            native.held.append(lock)
            native.counters[key] = self.counters.get(key, 0)
        native.counters[key] += 1
        return native.counters[key]

    def _own(self, tx: Any) -> MemoryTx:
        native = native_handle(tx)
        if not isinstance(native, MemoryTx) or native.store is not self:
            raise TypeError("the memory store takes a MemoryTx from its own transaction()")
        return native

    async def dedupe_holders(self, tx: Any, keys: Sequence[str]) -> dict[str, str]:
        staged = {c.dedupe_key: c.stream for c in native_handle(tx).staged if c.dedupe_key}
        held = {k: s for k in keys if (s := self.dedupe.get(k) or staged.get(k))}
        return {k: s.removeprefix("job:") for k, s in held.items()}

    async def apply(
        self, changes: Sequence[Change], *, guard: LeaseGuard | None = None
    ) -> list[bool]:
        allowed = None
        if guard is not None:
            allowed = [
                change.partition is None or self._holds(guard, change.partition)
                for change in changes
            ]
        flags = self._apply_all(changes, allowed)
        self._notify([c for c, ok in zip(changes, flags, strict=True) if ok])
        return flags

    def _apply_all(
        self, changes: Sequence[Change], allowed: Sequence[bool] | None = None
    ) -> list[bool]:
        flags = []
        versions = self.versions
        for i, change in enumerate(changes):
            # the compare-and-set first: a stale change costs one lookup
            ok = (
                versions.get(change.stream, 0) == change.expected_version
                and (allowed is None or allowed[i])
                and self._applicable(change)
            )
            if ok:
                self._apply_one(change)
            flags.append(ok)
        return flags

    def _applicable(self, change: Change) -> bool:
        """The rest of the checks once the stream's version matched."""
        if change.expected_version == 0 and change.dedupe_key and change.dedupe_key in self.dedupe:
            return False
        row = change.row
        code = row.exclusive_code if isinstance(row, Job) else None
        return not code or all(
            o.id == row.id or o.exclusive_code != code for o in self.jobs.values()
        )

    def _apply_one(self, change: Change) -> None:
        events = change.events
        if events:
            log = self.log
            position = self.last_position
            for event in events:
                position += 1
                log.append(_positioned(event, position))
            self.last_position = position
            self.versions[change.stream] = events[-1].version
        else:
            self.versions[change.stream] = change.expected_version
        if change.expected_version == 0 and change.dedupe_key:
            self.dedupe[change.dedupe_key] = change.stream
        kind, _, ident = change.stream.partition(":")
        if kind == "job":
            self._put_job(ident, change.row)
        elif change.row is None:
            self.schedules.pop(ident, None)
        else:
            self.schedules[ident] = change.row

    def _put_job(self, ident: str, row: Job | None) -> None:
        """Write (or, `row` None, remove) one job row, keeping the indexes in step."""
        if row is None:  # a job's lane and partition never change: only removal moves it
            old = self.jobs.pop(ident, None)
            if old is not None:
                del self._ids_of(old)[ident]
            return
        self.jobs[ident] = row
        self._ids_of(row)[ident] = None
        if row.status == _PENDING and row.lane == _FAST and ident not in self._queued_ids:
            self._queued_ids.add(ident)
            bisect.insort(self._queued.setdefault(row.partition, []), _queue_key(row))

    def _ids_of(self, job: Job) -> dict[str, None]:
        """The index entry `job` belongs to: its fast-lane partition's, or the long lane's."""
        if job.lane == Lane.LONG:
            return self._long_ids
        return self._fast_ids.setdefault(job.partition, {})

    def _rows(self, ids: Iterable[str]) -> Iterator[Job]:
        jobs = self.jobs
        return (jobs[ident] for ident in ids)

    def _fast_rows(self, partitions: Iterable[int]) -> Iterator[Job]:
        for partition in partitions:
            yield from self._rows(self._fast_ids.get(partition, ()))

    def _notify(self, applied: Sequence[Change]) -> None:
        wake = wake_of(applied)
        if wake is not None:
            self._feed.publish(wake)

    # --- the queue -----------------------------------------------------------------------
    async def fast_pending(self, partition: int, *, after_key: str | None, limit: int) -> list[Job]:
        queued = self._queued.get(partition)
        if not queued:
            return []
        i = 0 if after_key is None else bisect.bisect_right(queued, after_key, key=_order_of)
        jobs = self.jobs
        page: list[Job] = []
        while len(page) < limit and i < len(queued):
            ident = queued[i][2]
            job = jobs.get(ident)
            if job is not None and job.status == _PENDING:  # lane and partition are fixed
                page.append(job)
                i += 1
            else:  # the row left the queue since it was put in
                del queued[i]
                self._queued_ids.discard(ident)
        return page

    async def long_candidates(self, now: datetime, *, limit: int) -> list[Job]:
        rows = [
            j
            for j in self._rows(self._long_ids)
            if (
                (j.status == JobStatus.PENDING and j.next_run_at <= now)
                or (
                    j.status == JobStatus.RUNNING
                    and j.lease_until is not None
                    and j.lease_until <= now
                )
            )
        ]
        rows.sort(key=lambda j: (j.next_run_at, j.id))
        return rows[:limit]

    async def running_codes(self, now: datetime) -> set[str]:
        return {
            j.running_code
            for j in self.jobs.values()
            if j.status == JobStatus.RUNNING
            and j.running_code
            and j.lease_until is not None
            and j.lease_until > now
        }

    async def inflight(self, partition: int) -> list[Job]:
        return [j for j in self._fast_rows((partition,)) if j.inflight_token is not None]

    async def next_due(self, partitions: Sequence[int], lane: Lane) -> datetime | None:
        rows = self._rows(self._long_ids) if lane == Lane.LONG else self._fast_rows(set(partitions))
        times = [j.next_run_at for j in rows if j.status == JobStatus.PENDING]
        return min(times, default=None)

    # --- read models ---------------------------------------------------------------------
    async def get_job(self, job_id: str) -> Job | None:
        return self.jobs.get(job_id)

    async def list_jobs(
        self,
        flt: JobFilter,
        *,
        offset: int,
        limit: int,
        before: str | None = None,
        after: str | None = None,
        count_limit: int | None = None,
    ) -> tuple[list[Job], int]:
        rows = [
            j
            for j in self.jobs.values()
            if (flt.status is None or j.status == flt.status)
            and (flt.target is None or j.target == flt.target)
            and (flt.code is None or j.code == flt.code)
            and (flt.key is None or j.key == flt.key)
        ]
        total = len(rows) if count_limit is None else min(len(rows), count_limit)
        page = [
            j for j in rows if (before is None or j.id < before) and (after is None or j.id > after)
        ]
        page.sort(key=lambda j: j.id, reverse=after is None)
        return page[offset : offset + limit], total

    async def all_jobs(self) -> list[Job]:
        return sorted(self.jobs.values(), key=lambda j: j.id)

    async def get_schedule(self, code: str) -> Schedule | None:
        return self.schedules.get(code)

    async def list_schedules(self) -> list[Schedule]:
        return [self.schedules[c] for c in sorted(self.schedules)]

    async def replace_read_models(self, jobs: Sequence[Job], schedules: Sequence[Schedule]) -> None:
        self.jobs = {}
        self._fast_ids = {}
        self._long_ids = {}
        self._queued = {}
        self._queued_ids = set()
        for job in jobs:
            self._put_job(job.id, job)
        self.schedules = {s.code: s for s in schedules}

    def feed(self) -> Subscription:
        return self._feed.subscribe()


_PENDING = JobStatus.PENDING
_FAST = Lane.FAST


def _queue_key(job: Job) -> tuple[str, int, str]:
    """A PENDING fast row's place in its partition's queue: (order key, version, id)."""
    return (job.order_key, job.version, job.id)


def _order_of(key: tuple[str, int, str]) -> str:
    return key[0]


#: every field of an event but its position (the last), in order: a copy without
#: `replace`'s per-call field introspection (one event per change on the lanes' path)
_EVENT_FIELDS = tuple(f.name for f in fields(Event))
assert _EVENT_FIELDS[-1] == "position"
_EVENT_VALUES = operator.attrgetter(*_EVENT_FIELDS[:-1])
_EVENT_FROM_VALUES: Callable[..., Event] = Event


def _positioned(event: Event, position: int) -> Event:
    return _EVENT_FROM_VALUES(*_EVENT_VALUES(event), position)
