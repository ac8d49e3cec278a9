"""The MongoDB adapter's executor: a few lines per port operation.

Every document it sends comes from `builders.py`. Engine-owned writes run in
multi-document transactions (majority write concern, snapshot read concern) retried the
way `ClientSession.with_transaction` does: the whole body again on a
`TransientTransactionError`, the commit again on `UnknownTransactionCommitResult`.
A business module's own `AsyncClientSession` (with a transaction in progress) is joined
by `append_in`, which never starts, commits or aborts it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from datetime import datetime
from typing import Any, TypeVar

from jobledger.domain.events import Event
from jobledger.domain.jobs import Change, Job, Lane
from jobledger.domain.schedule_row import Schedule
from jobledger.storage.feed import LocalFeed, wake_of
from jobledger.storage.mongodb import builders as b
from jobledger.storage.port import (
    EVERYTHING,
    JobFilter,
    LeaseGuard,
    PartitionLease,
    Store,
    Transaction,
    Wake,
    native_handle,
    run_after_commit,
)
from jobledger.storage.rows import as_utc

logger = logging.getLogger("jobledger.storage.mongodb")
T = TypeVar("T")

FEED_CHECKPOINT = "__change_stream__"
TOKEN_SAVE_INTERVAL_S = 1.0  # the resume token is saved at most this often


class MongoStore(Store):
    name = "mongodb"

    def __init__(self, url: str, *, partitions: int = 64, database: str | None = None) -> None:
        from pymongo import AsyncMongoClient

        self.url = url
        self.partitions = partitions
        self.client: Any = AsyncMongoClient(url, tz_aware=True, retryWrites=True)
        self.db: Any = (
            self.client[database] if database else self.client.get_default_database("jobledger")
        )
        self._feed = LocalFeed()
        self._watcher: asyncio.Task[None] | None = None

    # --- life cycle ---------------------------------------------------------------------
    async def open(self) -> None:
        await self.migrate()
        if self._watcher is None:
            self._watcher = asyncio.create_task(self._watch(), name="jobledger-mongo-feed")

    async def migrate(self) -> None:
        existing = set(await self.db.list_collection_names())
        for name in (
            "events",
            "jobs",
            "schedules",
            "partitions",
            "workers",
            "checkpoints",
            "counters",
        ):
            if name not in existing:
                try:
                    await self.db.create_collection(name)
                except Exception as exc:  # created concurrently by another pod
                    if "already exists" not in str(exc):
                        raise
        for collection, keys, options in b.index_specs():
            await self.db[collection].create_index(keys, **options)

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with suppress(asyncio.CancelledError, Exception):
                await self._watcher
            self._watcher = None
        self._feed.close()
        await self.client.close()

    # --- transactions -------------------------------------------------------------------
    def _tx_options(self) -> dict[str, Any]:
        from pymongo import ReadPreference, WriteConcern
        from pymongo.read_concern import ReadConcern

        return {
            "read_concern": ReadConcern("snapshot"),
            "write_concern": WriteConcern("majority"),
            "read_preference": ReadPreference.PRIMARY,
        }

    async def _in_transaction(self, body: Callable[[Any], Awaitable[T]]) -> T:
        """Run `body(session)` in an engine-owned transaction, with_transaction style."""
        async with self.client.start_session() as session:
            result: T = await session.with_transaction(body, **self._tx_options())
            return result

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        async with self.client.start_session() as session:
            await session.start_transaction(**self._tx_options())
            tx = Transaction(native=session)
            try:
                yield tx
            except BaseException:
                if session.in_transaction:
                    await session.abort_transaction()
                raise
            await session.commit_transaction()
        run_after_commit(tx)

    # --- writes -----------------------------------------------------------------------------
    async def append_in(self, tx: Any, changes: Sequence[Change]) -> list[bool]:
        session = native_handle(tx)
        if not getattr(session, "in_transaction", False):
            raise TypeError("append_in needs an AsyncClientSession with a transaction in progress")
        return await self._write(session, changes, guard=None)

    async def apply(
        self, changes: Sequence[Change], *, guard: LeaseGuard | None = None
    ) -> list[bool]:
        if not changes:
            return []

        async def body(session: Any) -> list[bool]:
            return await self._write(session, changes, guard)

        flags = await self._in_transaction(body)
        self._publish([c for c, ok in zip(changes, flags, strict=True) if ok])
        return flags

    async def _write(
        self, session: Any, changes: Sequence[Change], guard: LeaseGuard | None
    ) -> list[bool]:
        """Filter every change that would lose *before* writing, so no write raises a
        duplicate-key error (which would abort a caller's transaction)."""
        keys = [c.dedupe_key for c in changes if c.is_new and c.dedupe_key]
        seen = (
            {
                d["dedupe_key"]
                async for d in self.db.events.find(
                    b.dedupe_query(keys), {"dedupe_key": 1}, session=session
                )
            }
            if keys
            else set()
        )
        new_streams = [c.stream for c in changes if c.is_new]
        existing = (
            {
                d["stream"]
                async for d in self.db.events.find(
                    b.stream_exists_query(new_streams), {"stream": 1}, session=session
                )
            }
            if new_streams
            else set()
        )
        held: set[int] | None = None
        if guard is not None:
            parts = [c.partition for c in changes if c.partition is not None]
            held = {
                d["_id"]
                async for d in self.db.partitions.find(
                    b.lease_held_query(guard.pod, guard.now, parts), {"_id": 1}, session=session
                )
            }
        flags: list[bool] = []
        winners: list[Change] = []
        for change in changes:
            ok = await self._write_row(session, change, seen, existing, held)
            if ok and change.is_new and change.dedupe_key:
                seen.add(change.dedupe_key)
            flags.append(ok)
            if ok:
                winners.append(change)
        events = [e for c in winners for e in c.events]
        if events:
            _, update = b.reserve_positions(len(events))
            counter = await self.db.counters.find_one_and_update(
                {"_id": "events"}, update, upsert=True, return_document=True, session=session
            )
            first = int(counter["value"]) - len(events) + 1
            docs = [b.event_doc(e, first + i) for i, e in enumerate(events)]
            await self.db.events.insert_many(docs, ordered=True, session=session)
        return flags

    async def _write_row(
        self,
        session: Any,
        change: Change,
        seen: set[str],
        existing: set[str],
        held: set[int] | None,
    ) -> bool:
        if held is not None and change.partition is not None and change.partition not in held:
            return False
        if change.is_new and (
            change.stream in existing or (change.dedupe_key and change.dedupe_key in seen)
        ):
            return False
        conflict = b.running_code_conflict_query(change)
        if conflict is not None and await self.db.jobs.find_one(
            conflict, {"_id": 1}, session=session
        ):
            return False
        collection = self.db[b.collection_of(change)]
        if change.is_new:
            if change.row is not None:
                await collection.insert_one(b.row_document(change), session=session)
            return True
        if change.row is None:
            result = await collection.delete_one(b.cas_query(change), session=session)
            return bool(result.deleted_count)
        result = await collection.replace_one(
            b.cas_query(change), b.row_document(change), session=session
        )
        return bool(result.matched_count)

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
            async for d in self.db.jobs.find(b.running_codes_query(now), {"running_code": 1})
        }

    async def inflight(self, partition: int) -> list[Job]:
        return await self._jobs(b.inflight_query(partition))

    async def next_due(self, partitions: Sequence[int], lane: Lane) -> datetime | None:
        query, sort = b.next_due_query(partitions, lane)
        doc = await self.db.jobs.find_one(query, {"next_run_at": 1}, sort=sort)
        return as_utc(doc["next_run_at"]) if doc else None

    # --- coordination ------------------------------------------------------------------------
    async def seed_partitions(self, count: int) -> None:
        from pymongo.errors import DuplicateKeyError

        for partition in range(count):
            query, update = b.seed_partition(partition)
            with suppress(DuplicateKeyError):  # another pod created it first
                await self.db.partitions.update_one(query, update, upsert=True)

    async def heartbeat(self, pod: str, now: datetime) -> None:
        query, update = b.heartbeat(pod, now)
        await self.db.workers.update_one(query, update, upsert=True)

    async def remove_worker(self, pod: str) -> None:
        await self.db.workers.delete_one({"_id": pod})

    async def live_workers(self, since: datetime) -> list[str]:
        return sorted(
            [d["_id"] async for d in self.db.workers.find(b.live_workers_query(since), {"_id": 1})]
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
        query, update = b.renew_partitions(pod, partitions, now, until)
        held = sorted([d["_id"] async for d in self.db.partitions.find(query, {"_id": 1})])
        if held:
            await self.db.partitions.update_many({**query, "_id": {"$in": held}}, update)
        return held

    async def release_partitions(self, pod: str, partitions: Sequence[int]) -> None:
        query, update = b.release_partitions(pod, partitions)
        await self.db.partitions.update_many(query, update)

    # --- read models -----------------------------------------------------------------------
    async def get_job(self, job_id: str) -> Job | None:
        doc = await self.db.jobs.find_one({"_id": job_id})
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

    async def all_jobs(self) -> list[Job]:
        return await self._jobs({}, [("_id", 1)])

    async def get_schedule(self, code: str) -> Schedule | None:
        doc = await self.db.schedules.find_one({"_id": code})
        return b.schedule_from_doc(doc) if doc else None

    async def list_schedules(self) -> list[Schedule]:
        return [b.schedule_from_doc(d) async for d in self.db.schedules.find({}).sort("_id", 1)]

    # --- the log ---------------------------------------------------------------------------
    async def read_stream(self, stream: str) -> list[Event]:
        cursor = self.db.events.find(b.stream_query(stream)).sort("version", 1)
        return [b.event_from_doc(d) async for d in cursor]

    async def read_events_at(self, keys: Sequence[tuple[str, int]]) -> list[Event]:
        places = list(dict.fromkeys(keys))
        if not places:
            return []
        cursor = self.db.events.find(b.events_at_query(places))
        return [b.event_from_doc(d) async for d in cursor]

    async def read_log(self, after: int, *, limit: int) -> list[Event]:
        cursor = self.db.events.find(b.read_log_query(after)).sort("_id", 1).limit(limit)
        return [b.event_from_doc(d) async for d in cursor]

    async def closed_streams(self, before: datetime, *, limit: int) -> list[str]:
        cursor = await self.db.events.aggregate(b.closed_streams_pipeline(before, limit))
        return [d["_id"] async for d in cursor]

    async def delete_streams(self, streams: Sequence[str]) -> int:
        if not streams:
            return 0
        result = await self.db.events.delete_many(b.delete_streams_query(streams))
        return int(result.deleted_count)

    async def load_checkpoint(self, name: str) -> tuple[int, Any]:
        doc = await self.db.checkpoints.find_one({"_id": name})
        return (int(doc["position"]), doc.get("state")) if doc else (0, None)

    async def save_checkpoint(self, name: str, position: int, state: Any) -> None:
        await self.db.checkpoints.update_one(
            {"_id": name}, b.checkpoint_update(position, state), upsert=True
        )

    async def replace_read_models(self, jobs: Sequence[Job], schedules: Sequence[Schedule]) -> None:
        async def body(session: Any) -> None:
            await self.db.jobs.delete_many({}, session=session)
            await self.db.schedules.delete_many({}, session=session)
            if jobs:
                await self.db.jobs.insert_many([b.job_doc(j) for j in jobs], session=session)
            if schedules:
                await self.db.schedules.insert_many(
                    [b.schedule_doc(s) for s in schedules], session=session
                )

        await self._in_transaction(body)

    # --- the change feed ---------------------------------------------------------------------
    def feed(self) -> AsyncIterator[Wake]:
        return self._feed.subscribe()

    async def _watch(self) -> None:
        """Change stream → wake-ups; the resume token is saved so a restart resumes.

        When the token has left the oplog the stream cannot resume: the lanes are told
        that anything may have changed (a catch-up scan) and the loss is logged.
        """
        from pymongo.errors import OperationFailure, PyMongoError

        while True:
            doc = await self.db.checkpoints.find_one({"_id": FEED_CHECKPOINT})
            token = doc.get("resume_token") if doc else None
            try:
                async with await self.db.watch(
                    b.change_stream_pipeline(), resume_after=token
                ) as stream:
                    self._feed.publish(EVERYTHING)
                    saved_at = 0.0
                    loop = asyncio.get_running_loop()
                    async for change in stream:
                        self._feed.publish(b.wake_from_change(change))
                        if loop.time() - saved_at >= TOKEN_SAVE_INTERVAL_S:
                            saved_at = loop.time()
                            await self.db.checkpoints.update_one(
                                {"_id": FEED_CHECKPOINT},
                                b.checkpoint_update(0, None, stream.resume_token),
                                upsert=True,
                            )
            except asyncio.CancelledError:
                raise
            except OperationFailure as exc:
                if exc.code in b.HISTORY_LOST_CODES:
                    logger.warning(
                        "change stream resume token is no longer in the oplog; "
                        "falling back to a catch-up scan"
                    )
                    await self.db.checkpoints.delete_one({"_id": FEED_CHECKPOINT})
                    self._feed.publish(EVERYTHING)
                else:
                    logger.warning("change stream failed (%s); reconnecting", exc)
                    await asyncio.sleep(1.0)
            except PyMongoError as exc:
                logger.warning("change stream lost (%s); reconnecting", exc)
                await asyncio.sleep(1.0)
