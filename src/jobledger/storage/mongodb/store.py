"""The MongoDB adapter's executor: a few lines per port operation.

Every document it sends comes from `builders.py` (indexes: `indexes.py`); transactions
write through `writes.py` and run as `transactions.py` says; log positions come from
`sequencer.py` (decisions D15, D41); the change feed is `watch.py`; `replay --apply`
swaps collections through `rebuild.py`. Engine-owned writes run in multi-document
transactions (snapshot read concern, majority write concern) retried as
`AsyncClientSession.with_transaction` does. A business module's own
`AsyncClientSession` (with a transaction in progress) is joined by `append_in`, which
never starts, commits or aborts it; the session may come from the application's own
`AsyncMongoClient`, passed as `MongoStore(client=...)`, whose read preference and
concerns the store does not inherit (`codec.database`, decisions D42). Business code
runs in `run_in_transaction(callback)` (decisions D40).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from datetime import UTC, datetime
from typing import Any, TypeVar

from pymongo import AsyncMongoClient
from pymongo.asynchronous.client_session import AsyncClientSession

from jobledger.domain.errors import InvalidArgument
from jobledger.domain.events import Event
from jobledger.domain.jobs import Change, Job, Lane
from jobledger.domain.schedules.row import Schedule
from jobledger.storage.feed import EVERYTHING, LocalFeed, Subscription, wake_of
from jobledger.storage.mongodb import builders as b
from jobledger.storage.mongodb import codec, metrics, rebuild, transactions
from jobledger.storage.mongodb.codec import Client, Database, Doc, majority, transaction_options
from jobledger.storage.mongodb.indexes import migrate
from jobledger.storage.mongodb.sequencer import Sequencer
from jobledger.storage.mongodb.sequencing import log_window
from jobledger.storage.mongodb.server import check_server
from jobledger.storage.mongodb.url_options import dead_ttl, split_dead_ttl
from jobledger.storage.mongodb.watch import ChangeWatcher
from jobledger.storage.mongodb.writes import dedupe_holders, next_version, write_changes
from jobledger.storage.port import (
    AdminReads,
    Coordination,
    JobFilter,
    LeaseGuard,
    LogReads,
    PartitionLease,
    ProjectionState,
    QueueReads,
    Retention,
    Store,
    Transaction,
    Writes,
    native_handle,
    run_after_commit,
)
from jobledger.storage.rows import as_utc, pauses_by_pod
from jobledger.storage.transaction import caller_hint

T = TypeVar("T")


class MongoStore(
    Store,
    Writes,
    QueueReads,
    Coordination,
    LogReads,
    AdminReads,
    Retention,
    ProjectionState,
):
    """The store on a MongoDB replica set (6.0 or later).

    Give it a URL (the store opens and closes its own client) or the application's own
    `AsyncMongoClient` (`client=`; the store never closes it) and a `database` name.
    `dead_ttl_seconds` (or the URL's `dead_ttl_seconds=`) adds a server-side TTL on
    DEAD rows (`indexes.dead_ttl_spec`).

    One object plays every role of the port (`store.writes is store`, and so on).
    """

    name = "mongodb"

    def __init__(
        self,
        url: str | None = None,
        *,
        client: Client | None = None,
        database: str | None = None,
        partitions: int = 64,
        dead_ttl_seconds: int | None = None,
    ) -> None:
        if (url is None) == (client is None):
            raise TypeError("MongoStore needs exactly one of url or client=")
        self.url = url
        self.partitions = partitions
        driver_url, from_url = split_dead_ttl(url) if url is not None else (None, None)
        self.dead_ttl_seconds = dead_ttl(from_url, dead_ttl_seconds)
        self._owns_client = client is None
        self.client: Client = (
            client
            if client is not None
            else AsyncMongoClient[Doc](driver_url, tz_aware=True, tzinfo=UTC, retryWrites=True)
        )
        self.db: Database = codec.database(self.client, database)
        self._feed = LocalFeed()
        # change streams return majority-committed changes: read the token the same way
        self.watcher = ChangeWatcher(
            self.db.with_options(read_concern=codec.MAJORITY_READS), self._feed
        )
        self._watch_task: asyncio.Task[None] | None = None
        self.sequencer = Sequencer(self.db, self._one_attempt)
        self.writes = self.queue = self.coordination = self.log = self
        self.admin = self.retention = self.projections = self

    # --- life cycle ---------------------------------------------------------------------
    async def open(self) -> None:
        await check_server(self.client, self.db.name)
        await self.migrate()
        if self._watch_task is None:
            self._watch_task = asyncio.create_task(self.watcher.run(), name="jobledger-mongo-feed")

    async def migrate(self) -> None:
        await migrate(self.db, self.dead_ttl_seconds)

    async def close(self) -> None:
        if self._watch_task is not None:
            self._watch_task.cancel()
            with suppress(asyncio.CancelledError, Exception):
                await self._watch_task
            self._watch_task = None
        self._feed.close()
        if self._owns_client:
            await self.client.close()

    def register_metrics(self, registry: Any) -> None:
        """The watcher's and sequencer's counters on a Prometheus `registry` (metrics.py)."""
        metrics.register(registry, self.watcher, self.sequencer)

    # --- transactions -------------------------------------------------------------------
    async def _in_transaction(self, body: Callable[[AsyncClientSession], Awaitable[T]]) -> T:
        """Run `body(session)` in an engine-owned transaction, with_transaction style."""
        return await transactions.retried(self.client, body)

    async def _one_attempt(self, body: Callable[[AsyncClientSession], Awaitable[T]]) -> T | None:
        """Run `body(session)` once in an engine-owned transaction; None on a conflict."""
        return await transactions.one_attempt(self.client, body)

    async def run_in_transaction(self, callback: Callable[[Transaction], Awaitable[T]]) -> T:
        """Run business code in a transaction, retried as `with_transaction` does: the
        way to run business code on MongoDB (decisions D40).

        `callback(tx)` writes with `tx.native` (the session) and enqueues with `tx=tx`.
        On a `TransientTransactionError` (a write conflict — another transaction with
        the same dedupe key or `next_version` key —, a failover) the transaction is
        aborted and the *whole callback* runs again with a fresh `tx`, after PyMongo's
        backoff, for up to 120 s (the second of two with one dedupe key then finds the
        first's job: `inserted=False`). On `UnknownTransactionCommitResult` only the
        commit is retried. Only the committed attempt's after-commit hooks run, once,
        after the commit. So the callback must be safe to re-run: only database writes
        in it, side effects in `tx.after_commit`.
        """
        attempt: list[Transaction] = []

        async def body(session: AsyncClientSession) -> T:
            attempt[:] = [Transaction(native=session)]
            return await callback(attempt[0])

        result = await self._in_transaction(body)
        run_after_commit(attempt[0])
        return result

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        """One attempt, no retry of the body (a context manager cannot re-run it): a
        `TransientTransactionError` reaches the caller with a one-line note naming
        `run_in_transaction`, which runs a callback again; an
        `UnknownTransactionCommitResult` commit is retried."""
        async with self.client.start_session() as session:
            await session.start_transaction(**transaction_options())
            tx = Transaction(native=session)
            try:
                yield tx
            except BaseException as exc:
                if session.in_transaction:
                    await session.abort_transaction()
                transactions.explain_conflict(exc)
                raise
            try:
                await transactions.commit(session)
            except BaseException as exc:
                transactions.explain_conflict(exc)
                raise
        run_after_commit(tx)

    # --- writes -----------------------------------------------------------------------------
    async def append_in(self, tx: Any, changes: Sequence[Change]) -> list[bool]:
        return await write_changes(self.db, _joined(tx), changes, guard=None)

    async def dedupe_holders(self, tx: Any, keys: Sequence[str]) -> dict[str, str]:
        return await dedupe_holders(self.db, _joined(tx), keys)

    async def next_version(self, tx: Any, key: str) -> int:
        return await next_version(self.db, _joined(tx), key)

    async def apply(
        self, changes: Sequence[Change], *, guard: LeaseGuard | None = None
    ) -> list[bool]:
        if not changes:
            return []

        async def body(session: AsyncClientSession) -> list[bool]:
            return await write_changes(self.db, session, changes, guard)

        flags = await self._in_transaction(body)
        self._publish([c for c, ok in zip(changes, flags, strict=True) if ok])
        return flags

    def _publish(self, applied: Sequence[Change]) -> None:
        wake = wake_of(applied)
        if wake is not None:
            self._feed.publish(wake)

    # --- the queue -------------------------------------------------------------------------
    async def _jobs(
        self, query: dict[str, Any], sort: list[tuple[str, int]] | None = None, limit: int = 0
    ) -> list[Job]:
        cursor = self.db.jobs.find(query)
        if sort:
            cursor = cursor.sort(sort)
        if limit:
            cursor = cursor.limit(limit)
        return [b.job_from_doc(doc) async for doc in cursor]

    async def fast_pending(self, partition: int, *, after_key: str | None, limit: int) -> list[Job]:
        query, sort = b.fast_pending_query(partition, after_key)
        return await self._jobs(query, sort, limit)

    async def long_candidates(self, now: datetime, *, limit: int) -> list[Job]:
        query, sort = b.long_candidates_query(now)
        return await self._jobs(query, sort, limit)

    async def running_codes(self, now: datetime) -> set[str]:
        return {
            d["running_code"]
            async for d in self.db.jobs.find(b.running_codes_query(now), b.fields("running_code"))
        }

    async def inflight(self, partition: int) -> list[Job]:
        return await self._jobs(b.inflight_query(partition))

    async def next_due(self, partitions: Sequence[int], lane: Lane) -> datetime | None:
        query, sort = b.next_due_query(partitions, lane)
        doc = await self.db.jobs.find_one(query, b.fields("next_run_at"), sort=sort)
        return as_utc(doc["next_run_at"]) if doc else None

    # --- coordination ------------------------------------------------------------------------
    async def seed_partitions(self, count: int) -> None:
        from pymongo.errors import DuplicateKeyError

        for partition in range(count):
            query, update = b.seed_partition(partition)
            with suppress(DuplicateKeyError):  # another pod created it first
                await self.db.partitions.update_one(query, update, upsert=True)

    async def heartbeat(
        self, pod: str, now: datetime, paused: Mapping[str, datetime] | None = None
    ) -> None:
        query, update = b.heartbeat(pod, now, paused)
        await self.db.workers.update_one(query, update, upsert=True)

    async def live_pauses(self, since: datetime) -> dict[str, dict[str, datetime]]:
        found = self.db.workers.find(b.live_pauses_query(since), {"_id": 1, "paused": 1})
        return pauses_by_pod(sorted([(d["_id"], d.get("paused")) async for d in found]))

    async def remove_worker(self, pod: str) -> None:
        await self.db.workers.delete_one(b.by_id(pod))

    async def live_workers(self, since: datetime) -> list[str]:
        return sorted(
            [d["_id"] async for d in self.db.workers.find(b.live_workers_query(since), b.fields())]
        )

    async def leases(self) -> list[PartitionLease]:
        return [
            PartitionLease(d["_id"], d.get("owner"), as_utc(d.get("lease_until")))
            async for d in self.db.partitions.find({}).sort("_id", 1)
        ]

    async def take_partition(
        self, partition: int, pod: str, now: datetime, until: datetime
    ) -> bool:
        query, update = b.take_partition(partition, pod, now, until)
        result = await self.db.partitions.update_one(query, update)
        return bool(result.matched_count)

    async def renew_partitions(
        self, pod: str, partitions: Sequence[int], now: datetime, until: datetime
    ) -> list[int]:
        """One atomic update per lease, in the caller's order: a partition is returned iff
        this call extended a lease `pod` held (no read-then-write window)."""
        held: list[int] = []
        for partition in dict.fromkeys(partitions):
            query, update = b.renew_partition(pod, partition, now, until)
            if (await self.db.partitions.update_one(query, update)).matched_count:
                held.append(partition)
        return held

    async def release_partitions(self, pod: str, partitions: Sequence[int]) -> None:
        query, update = b.release_partitions(pod, partitions)
        await self.db.partitions.update_many(query, update)

    # --- read models -----------------------------------------------------------------------
    async def get_job(self, job_id: str) -> Job | None:
        doc = await self.db.jobs.find_one(b.by_id(job_id))
        return b.job_from_doc(doc) if doc else None

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
        query = b.list_jobs_query(flt)
        if count_limit == 0:
            total = 0
        elif count_limit is None:
            total = await self.db.jobs.count_documents(query)
        else:
            total = await self.db.jobs.count_documents(query, limit=count_limit)
        page_query, order = b.list_jobs_page(query, before=before, after=after)
        cursor = self.db.jobs.find(page_query).sort("_id", order).skip(offset).limit(limit)
        return [b.job_from_doc(d) async for d in cursor], int(total)

    async def get_schedule(self, code: str) -> Schedule | None:
        doc = await self.db.schedules.find_one(b.by_id(code))
        return b.schedule_from_doc(doc) if doc else None

    async def list_schedules(self) -> list[Schedule]:
        return [b.schedule_from_doc(d) async for d in self.db.schedules.find({}).sort("_id", 1)]

    async def dedupe_holder(self, key: str) -> str | None:
        """The holder in the committed log (majority read concern), outside any session."""
        query, projection = b.dedupe_query([key]), b.fields("stream")
        doc = await majority(self.db.events).find_one(query, projection)
        return None if doc is None else str(doc["stream"]).removeprefix("job:")

    # --- the log ---------------------------------------------------------------------------
    async def read_stream(self, stream: str) -> list[Event]:
        """A stream's events (majority read concern); a pending one has no position yet."""
        cursor = majority(self.db.events).find(b.stream_query(stream)).sort("version", 1)
        return [b.event_from_doc(d) async for d in cursor]

    async def read_events_at(self, keys: Sequence[tuple[str, int]]) -> list[Event]:
        places = list(dict.fromkeys(keys))
        if not places:
            return []
        cursor = majority(self.db.events).find(b.events_at_query(places))
        return [b.event_from_doc(d) async for d in cursor]

    async def read_log(self, after: int, *, limit: int) -> list[Event]:
        """Position what is pending (sequencer.catch_up), then read the high-water mark
        and the positioned events up to it in one snapshot: majority-committed data at
        one cluster time, so a mark is never read without every position below it, on a
        replica set or across shards (decisions D15, D42)."""
        await self.sequencer.catch_up()
        async with self.client.start_session(snapshot=True) as session:
            window = log_window(after, await self.sequencer.high_water(session))
            if window is None:
                return []
            query, sort = b.read_log_query(*window)
            cursor = self.db.events.find(query, session=session).sort(sort).limit(limit)
            return [b.event_from_doc(d) async for d in cursor]

    async def read_log_newest(self, before: int | None, *, limit: int) -> list[Event]:
        query, sort = b.log_newest_query(before)
        cursor = majority(self.db.events).find(query).sort(sort).limit(limit)
        return [b.event_from_doc(d) async for d in cursor]

    async def closed_streams(self, before: datetime, *, limit: int) -> list[str]:
        pipeline = b.closed_streams_pipeline(before, limit)
        cursor = await majority(self.db.events).aggregate(pipeline, allowDiskUse=True)
        return [d["_id"] async for d in cursor]

    async def delete_streams(self, streams: Sequence[str]) -> int:
        if not streams:
            return 0
        result = await self.db.events.delete_many(b.delete_streams_query(streams))
        return int(result.deleted_count)

    async def load_checkpoint(self, name: str) -> tuple[int, Any]:
        return b.checkpoint_from_doc(await self.db.checkpoints.find_one(b.by_id(name)))

    async def save_checkpoint(self, name: str, position: int, state: Any) -> None:
        await self.db.checkpoints.update_one(
            b.by_id(name), b.checkpoint_update(position, state), upsert=True
        )

    async def replace_read_models(self, jobs: Sequence[Job], schedules: Sequence[Schedule]) -> None:
        """Build both read models beside the live ones, then rename each over its live
        one (no transaction: no limit on the queue's size; each rename is atomic, the
        two follow each other; decisions D43)."""
        await rebuild.build(self.db, "jobs", (b.job_doc(j) for j in jobs))
        await rebuild.build(self.db, "schedules", (b.schedule_doc(s) for s in schedules))
        await rebuild.swap(self.db, ("jobs", "schedules"))
        self._feed.publish(EVERYTHING)  # the change stream does not report a rename

    # --- the change feed ---------------------------------------------------------------------
    def feed(self) -> Subscription:
        return self._feed.subscribe()


def _joined(tx: Any) -> AsyncClientSession:
    """The caller's session (a `Transaction` or the session itself), which must have a
    transaction in progress: the store joins it, never starts or ends it."""
    session = native_handle(tx)
    if not isinstance(session, AsyncClientSession):
        raise TypeError(
            "the MongoDB store takes an AsyncClientSession with a transaction in progress"
            f" (or the Transaction of its own transaction()){caller_hint(session)}"
        )
    if not session.in_transaction:
        raise InvalidArgument(
            "enqueue needs a session inside a transaction: `await"
            " session.start_transaction()` first, or run through store.run_in_transaction"
        )
    return session
