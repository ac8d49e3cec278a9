"""The storage port: a store is the bundle of narrow role interfaces, each named by what
its callers need, plus its life cycle and its change feed.

    store.writes        Writes           business transactions, append_in, apply (the CAS)
    store.queue         QueueReads       what the lanes read to find work
    store.coordination  Coordination     partition leases and pod liveness (plain rows)
    store.log           LogReads         the log, by stream and by position
    store.admin         AdminReads       job and schedule rows by id, listed, dedupe holders
    store.retention     Retention        the archive's cut: closed streams, their removal
    store.projections   ProjectionState  checkpoints and the rebuilt inline read models

A caller takes the narrowest role it needs. The semantics live in the pure domain; an
adapter only has to:

* apply `Change`s atomically: append the events and write the row they leave,
  **only if** the stream is still at `expected_version` (a compare-and-set), and for
  a new job only if its `dedupe_key` was never seen in the log. A change that loses is
  dropped on its own; the others in the same call still commit;
* keep the queue's indexes so the lane reads stay flat as the backlog grows;
* hand out log positions that readers never skip (commit order, see `LogReads.read_log`);
* wake the lanes through `Store.feed()` when work is committed.

Method names are unique across the roles. `tests/contract/` is the behaviour suite
every adapter passes, one folder per role.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobledger.domain.chain import LogRow, event_row
from jobledger.domain.events import Event
from jobledger.domain.jobs import Change, Job, JobStatus, Lane
from jobledger.domain.schedules.row import Schedule
from jobledger.storage.feed import Subscription
from jobledger.storage.liveness import Liveness

# the handle `Writes.transaction()` yields, and the helpers every adapter's write path uses
from jobledger.storage.transaction import Transaction as Transaction
from jobledger.storage.transaction import native_handle as native_handle
from jobledger.storage.transaction import run_after_commit as run_after_commit


@dataclass(frozen=True, slots=True)
class LeaseGuard:
    """Apply job changes only for partitions `pod` still holds at `now`.

    Used for the fast lane's in-flight marks: a pod that lost a partition's lease (it
    stalled past it) must not send another row of it.
    """

    pod: str
    now: datetime


@dataclass(frozen=True, slots=True)
class JobFilter:
    status: JobStatus | None = None
    target: str | None = None
    code: str | None = None
    key: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionLease:
    partition: int
    owner: str | None
    lease_until: datetime | None


@dataclass(frozen=True, slots=True)
class Beat:
    """What one heartbeat of a pod reads back (`Coordination.beat`)."""

    held: list[int]  # of the partitions it renewed, those it still holds
    live: list[str]  # pods whose heartbeat is newer than `live_since`
    leases: list[PartitionLease]  # every lease row, after the renewal
    #: of `live`, the pods that advertise a liveness token (`Coordination.liveness`)
    watched: list[str] = field(default_factory=list)


class Writes(abc.ABC):
    """The write path: business transactions, new jobs inside them, and the engine's
    compare-and-set of changes. Every method is safe to call from several pods at once."""

    @abc.abstractmethod
    def transaction(self) -> AbstractAsyncContextManager[Transaction]:
        """Open a business transaction on this store: commit on exit, roll back on error,
        then run the after-commit hooks (see `Transaction`)."""

    @abc.abstractmethod
    async def append_in(self, tx: Any, changes: Sequence[Change]) -> list[bool]:
        """Apply new-job `changes` inside the caller's own transaction `tx`.

        `tx` is the adapter's native handle (a `sqlite3.Connection` in a transaction,
        a psycopg `AsyncConnection`, a pymongo `AsyncClientSession`, a memory
        transaction). A change whose dedupe key is already in the log is filtered out
        *before* any insert, so this never raises a duplicate-key error that would
        abort the caller's transaction. Returns, per change, whether it was written.
        Never commits: the caller does. The change feed fires only after the commit.
        On MongoDB a concurrent transaction enqueueing the same dedupe key makes the
        server abort `tx` (a TransientTransactionError): run business code there through
        `run_in_transaction(callback)`, which runs it again and then finds the holder."""

    @abc.abstractmethod
    async def dedupe_holders(self, tx: Any, keys: Sequence[str]) -> dict[str, str]:
        """The id of the job that holds each of the dedupe `keys` in the log, read inside
        `tx` (so a job enqueued earlier in the same transaction counts); keys nobody
        holds are left out. `enqueue` asks after a dedupe hit, so the caller learns
        which job it is. Reads only: never aborts `tx`."""

    @abc.abstractmethod
    async def next_version(self, tx: Any, key: str) -> int:
        """The next number of `key`'s counter (1 first), counted inside the caller's own
        transaction `tx`: kept if `tx` commits, given again if it rolls back. A second
        transaction asking for the same key waits until this one has ended (a row lock,
        SQLite's one writer; on MongoDB a write conflict aborts it, for
        `run_in_transaction` to retry), so a key's numbers follow commit order.
        Coordination state, like a lease: no event; the number is recorded where it is
        used, in a JobEnqueued's `version`."""

    @abc.abstractmethod
    async def apply(
        self, changes: Sequence[Change], *, guard: LeaseGuard | None = None
    ) -> list[bool]:
        """Apply `changes` in one engine-owned transaction; return which were applied.

        A change is applied iff its stream is at `expected_version` (new jobs: and
        their dedupe key is unseen), a RUNNING row with a `running_code` does not
        collide with another RUNNING row of that code, and — with `guard` — its
        partition's lease is held by `guard.pod` and has not expired at `guard.now`.
        Losers are dropped one by one, never the whole call.
        """

    async def mark_first(self, change: Change, guard: LeaseGuard) -> bool:
        """Apply the in-flight mark `change` of a row the lane has not read (one it was
        handed by a `Wake`): as `apply([change], guard=guard)`, and only if no PENDING
        fast-lane row of the same partition, target and order key comes before it in
        (version, id) order. False — nothing written — also when the store cannot
        check that; the lane then reads the partition."""
        return False


class QueueReads(abc.ABC):
    """What the lanes read to find work, each read served by an index of the queue."""

    @abc.abstractmethod
    async def fast_pending(self, partition: int, *, after_key: str | None, limit: int) -> list[Job]:
        """PENDING fast-lane rows of `partition` in (order key, version, id) order.

        Keyset paging: rows whose order key is greater than `after_key`. Served by an
        index on (partition, order key, version) of PENDING fast rows, so a page costs
        the same however long the backlog is."""

    @abc.abstractmethod
    async def long_candidates(self, now: datetime, *, limit: int) -> list[Job]:
        """Long-lane rows free to reserve: PENDING and due, or RUNNING with an expired
        lease; oldest `next_run_at` first."""

    @abc.abstractmethod
    async def running_codes(self, now: datetime) -> set[str]:
        """Codes of exclusive RUNNING rows whose lease is still live."""

    @abc.abstractmethod
    async def inflight(self, partition: int) -> list[Job]:
        """Fast rows of `partition` carrying an in-flight mark."""

    async def inflight_in(self, partitions: Sequence[int]) -> list[Job]:
        """`inflight` of each of `partitions` (a takeover reads them in one call; this
        default reads them one by one)."""
        rows: list[Job] = []
        for partition in partitions:
            rows += await self.inflight(partition)
        return rows

    @abc.abstractmethod
    async def next_due(self, partitions: Sequence[int], lane: Lane) -> datetime | None:
        """Earliest `next_run_at` of PENDING rows (in `partitions` for the fast lane),
        so a worker arms a timer instead of polling."""

    async def pending_partitions(
        self, partitions: Sequence[int], *, due_by: datetime | None
    ) -> list[int]:
        """Of `partitions`, those with a PENDING fast-lane row (due by `due_by` when it
        is given): the partition workers a pod's safety poll wakes."""
        found: list[int] = []
        for partition in partitions:
            due = await self.next_due([partition], Lane.FAST)
            if due is not None and (due_by is None or due <= due_by):
                found.append(partition)
        return found


class Coordination(abc.ABC):
    """Partition leases and pod liveness: plain compare-and-set rows, no events."""

    def liveness(self, pod: str) -> Liveness | None:
        """`pod`'s liveness token (`storage.liveness`), or None when this store has none:
        its pods are then taken over when their leases expire."""
        return None

    @abc.abstractmethod
    async def seed_partitions(self, count: int) -> None:
        """Create the `count` lease rows once, even when several pods race on an empty
        store, repairing duplicates."""

    @abc.abstractmethod
    async def heartbeat(
        self, pod: str, now: datetime, paused: Mapping[str, datetime] | None = None
    ) -> None:
        """Write `pod`'s liveness row at `now`, with the targets paused on it and since
        when (`paused`; None: the pod does not say, as a pod of an earlier release)."""

    @abc.abstractmethod
    async def live_pauses(self, since: datetime) -> dict[str, dict[str, datetime]]:
        """The paused targets of each pod whose heartbeat is newer than `since` and
        says them, as its last heartbeat wrote them: `{pod: {target: paused since}}`."""

    @abc.abstractmethod
    async def remove_worker(self, pod: str) -> None: ...

    @abc.abstractmethod
    async def live_workers(self, since: datetime) -> list[str]:
        """Pods whose heartbeat is newer than `since`."""

    @abc.abstractmethod
    async def leases(self) -> list[PartitionLease]: ...

    @abc.abstractmethod
    async def take_partition(
        self, partition: int, pod: str, now: datetime, until: datetime
    ) -> bool:
        """Atomically take `partition` if it is free, expired, or already `pod`'s."""

    @abc.abstractmethod
    async def renew_partitions(
        self, pod: str, partitions: Sequence[int], now: datetime, until: datetime
    ) -> list[int]:
        """Extend the leases `pod` still holds; return those it still holds."""

    @abc.abstractmethod
    async def release_partitions(self, pod: str, partitions: Sequence[int]) -> None: ...

    # The batched forms below (one call per heartbeat and per takeover) compose the
    # single-row methods; a store whose round trips are worth saving (PostgreSQL)
    # overrides them with one statement each.
    async def beat(
        self,
        pod: str,
        now: datetime,
        renew: Sequence[int],
        until: datetime,
        live_since: datetime,
        paused: Mapping[str, datetime] | None = None,
    ) -> Beat:
        """One heartbeat: write `pod`'s liveness (with its paused targets), renew its
        leases on `renew`, read the live pods and every lease row."""
        await self.heartbeat(pod, now, paused)
        held = await self.renew_partitions(pod, renew, now, until) if renew else []
        live = await self.live_workers(live_since)
        return Beat(held, live, await self.leases(), self.watched(pod, live))

    def watched(self, pod: str, live: list[str]) -> list[str]:
        """Of the `live` pods, those that advertise a liveness token (`Beat.watched`), as
        the port's `beat` reads them: none for a store without tokens."""
        return []

    async def take_partitions(
        self, partitions: Sequence[int], pod: str, now: datetime, until: datetime
    ) -> list[int]:
        """`take_partition` of each of `partitions`; those taken (a partition another
        pod is taking at this very moment may be skipped rather than waited for)."""
        return [p for p in partitions if await self.take_partition(p, pod, now, until)]


class LogReads(abc.ABC):
    """The log: streams, events at given places, and pages in position order."""

    @abc.abstractmethod
    async def read_stream(self, stream: str) -> list[Event]: ...

    async def read_events_at(self, keys: Sequence[tuple[str, int]]) -> list[Event]:
        """The events at the given (stream, version) places that exist, in any order.

        Projections that need a job's target and code (only its JobEnqueued, version 1,
        carries them) or the event before the first one of a page look them up here, one round
        trip per page, instead of keeping a map per open job. Adapters serve it from their
        (stream, version) unique index; this default reads the streams one by one."""
        wanted = set(keys)
        found: list[Event] = []
        for stream in sorted({stream for stream, _ in wanted}):
            found.extend(e for e in await self.read_stream(stream) if (stream, e.version) in wanted)
        return found

    @abc.abstractmethod
    async def read_log(self, after: int, *, limit: int) -> list[Event]:
        """Events with a position greater than `after`, in position order.

        Never returns an event while an event with a smaller position may still commit: a
        reader that saves the last position it saw never skips a late-committing
        transaction."""

    async def read_log_rows(self, after: int, *, limit: int) -> list[LogRow]:
        """`read_log`'s events as `domain.chain.LogRow` tuples, what `verify` checks.

        Same events, same order, same guarantee; adapters read them straight from their
        rows without building an `Event` each. This default converts `read_log`'s."""
        return [event_row(event) for event in await self.read_log(after, limit=limit)]

    async def read_log_by_stream(self, after: tuple[str, int], *, limit: int) -> list[Event] | None:
        """`limit` events after (stream, version) `after`, in that order, streams by code point
        (replay's read, off the unique index); None (default): replay sorts the log itself."""
        return None

    @abc.abstractmethod
    async def read_log_newest(self, before: int | None, *, limit: int) -> list[Event]:
        """The `limit` events with a position smaller than `before` (None: from the newest),
        newest first, by the position index: the admin's browse of finished jobs pages back
        through the log with it. Unlike `read_log` it may show an event while a smaller
        position is still to commit: fine for a browse, not for a projection."""


class AdminReads(abc.ABC):
    """The inline read models as the admin API shows them: a job or schedule by its id,
    the jobs listed by keyset, the schedules, and who holds a dedupe key."""

    @abc.abstractmethod
    async def get_job(self, job_id: str) -> Job | None: ...

    @abc.abstractmethod
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
        """Newest first (by id, which is time-ordered); returns (page, total).

        Keyset paging (the admin listing's cost must not grow with the table): `before` keeps
        rows whose id is smaller, newest first; `after` keeps rows whose id is larger and
        returns them **oldest first** (the page before a cursor, or the oldest matching row
        with `after=""`). `total` counts every row matching `flt` (cursors aside), but at most
        `count_limit` of them when given (0: no count at all), so a bounded caller never pays
        for a full `count(*)`."""

    @abc.abstractmethod
    async def get_schedule(self, code: str) -> Schedule | None: ...

    @abc.abstractmethod
    async def list_schedules(self) -> list[Schedule]:
        """Sorted by code."""

    @abc.abstractmethod
    async def dedupe_holder(self, key: str) -> str | None:
        """The id of the job that holds dedupe `key` in the committed log, or None — a
        read for admins and tools, outside any caller's transaction (and without the
        write lock a SQLite transaction takes)."""


class Retention(abc.ABC):
    """The log archive's cut: which closed job streams may go, and their removal. Kept
    apart from `LogReads` so that readers of the log hold no role that deletes it."""

    @abc.abstractmethod
    async def closed_streams(self, before: datetime, *, limit: int) -> list[str]:
        """Job streams that have left the queue (no read-model row) and whose newest event is
        older than `before`: what the log archive may export and then remove. Schedule
        streams and open jobs are never returned."""

    @abc.abstractmethod
    async def delete_streams(self, streams: Sequence[str]) -> int:
        """Remove every event of `streams` (closed job streams the archive has written out);
        returns how many events were removed. Other events keep their positions. Their
        dedupe keys are forgotten with them: the dedupe window is the log's retention."""


class ProjectionState(abc.ABC):
    """What projections keep besides the log: the checkpoints of checkpointed projections
    (position and state), and the inline read models rebuilt from the log by
    `replay --apply`. Both are derived from the log and written only by projection code."""

    @abc.abstractmethod
    async def load_checkpoint(self, name: str) -> tuple[int, Any]:
        """(position, state) saved by `save_checkpoint`, or (0, None)."""

    @abc.abstractmethod
    async def save_checkpoint(self, name: str, position: int, state: Any) -> None: ...

    @abc.abstractmethod
    async def replace_read_models(self, jobs: Sequence[Job], schedules: Sequence[Schedule]) -> None:
        """Swap the jobs and schedules read models for the given rows, atomically."""


class Store(abc.ABC):
    """One database: its roles, its life cycle and its change feed."""

    name: str = "store"
    partitions: int = 64

    writes: Writes
    queue: QueueReads
    coordination: Coordination
    log: LogReads
    admin: AdminReads
    retention: Retention
    projections: ProjectionState

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and make sure the schema exists (idempotent migrations)."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    def feed(self) -> Subscription:
        """Wake-up hints after commits, from this process and from others; every commit
        after the subscription's `open()` returns wakes it."""
