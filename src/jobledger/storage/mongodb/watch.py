"""The change-stream watcher: queue writes -> wake-ups, for as long as the store is open.

It never gives up. Every failure — the server unreachable at start, a stepdown, a
network error, a resume token that left the oplog, anything else — is logged, counted
(`failures`, `consecutive_failures`; a reconnect publishes `EVERYTHING` so the lanes
scan the database), and followed by a jittered exponential backoff (full jitter,
`backoff_delay`) before the next attempt. A stream that opens after failures logs how
many there were; the counters are Prometheus metrics too (`metrics.py`). The resume token is saved only after the
watcher published a change since the last save, and at most once per
`TOKEN_SAVE_INTERVAL_S`, so an idle store writes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Mapping
from typing import Any

from jobledger.domain.jobs import Lane
from jobledger.storage.feed import EVERYTHING, LocalFeed, Wake
from jobledger.storage.mongodb import builders as b
from jobledger.storage.mongodb.codec import Database

Doc = dict[str, Any]

logger = logging.getLogger("jobledger.storage.mongodb")

FEED_CHECKPOINT = "__change_stream__"
TOKEN_SAVE_INTERVAL_S = 1.0
BACKOFF_BASE_S = 0.25
BACKOFF_CAP_S = 30.0


def change_stream_pipeline() -> list[Doc]:
    """Watch the queue: inserts, replacements and updates of jobs and schedules.

    An update event carries the row's current document (`watch_options`:
    `fullDocument: "updateLookup"`), from which the partition and lane are projected:
    its `updatedFields` could not name them, since they list only the fields whose
    value changed and a job's partition and lane never change. Deletes are left out:
    a row leaves the queue through the pod that owns its partition, which goes on
    reading that partition anyway. Only the fields a wake-up needs are projected, so a
    change event stays small.
    """
    return [
        {
            "$match": {
                "ns.coll": {"$in": ["jobs", "schedules"]},
                "operationType": {"$in": ["insert", "replace", "update"]},
            }
        },
        {
            "$project": {
                "operationType": 1,
                "ns": 1,
                "fullDocument.partition": 1,
                "fullDocument.lane": 1,
                "updateDescription.updatedFields.partition": 1,
                "updateDescription.updatedFields.lane": 1,
                "documentKey": 1,
            }
        },
    ]


def watch_options(resume_token: Any) -> Doc:
    """The options of `AsyncDatabase.watch`: each update event looks up the row's
    current document (a row deleted meanwhile has none: the wake-up then covers every
    partition), and the stream resumes after `resume_token` when there is one."""
    return {"full_document": "updateLookup", "resume_after": resume_token}


def wake_from_change(change: Mapping[str, Any]) -> Wake:
    """Turn one change-stream document into a wake-up hint."""
    collection = change.get("ns", {}).get("coll")
    if collection == "schedules":
        return Wake(frozenset(), frozenset(), True)
    document = change.get("fullDocument") or (
        change.get("updateDescription", {}).get("updatedFields") or {}
    )
    partition = document.get("partition")
    lane = document.get("lane")
    if partition is None or lane is None:
        # a change without the row's fields: anything may be runnable
        return Wake(None, None, False)
    return Wake(frozenset({int(partition)}), frozenset({Lane(lane)}), False)


HISTORY_LOST_CODES = frozenset({286, 280})  # ChangeStreamHistoryLost, ChangeStreamFatalError


class StreamClosed(Exception):
    """The server closed the change stream (an invalidate event): open a new one."""


def backoff_delay(
    attempt: int, rng: random.Random, base: float = BACKOFF_BASE_S, cap: float = BACKOFF_CAP_S
) -> float:
    """Seconds to wait before retry number `attempt` (1, 2, ...): uniform in
    [0, min(cap, base * 2**(attempt-1))] (exponential backoff with full jitter)."""
    ceiling = min(cap, base * 2 ** min(max(attempt - 1, 0), 32))
    return rng.uniform(0.0, ceiling)


class ChangeWatcher:
    def __init__(
        self,
        db: Database,
        feed: LocalFeed,
        *,
        rng: random.Random | None = None,
        backoff_base_s: float = BACKOFF_BASE_S,
        backoff_cap_s: float = BACKOFF_CAP_S,
    ) -> None:
        self.db = db
        self.feed = feed
        self.rng = rng or random.Random()
        self.backoff = (backoff_base_s, backoff_cap_s)
        self.failures = 0  # since the store opened
        self.consecutive_failures = 0
        self.streams_opened = 0

    async def run(self) -> None:
        while True:
            try:
                await self._follow()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.failures += 1
                self.consecutive_failures += 1
                delay = backoff_delay(self.consecutive_failures, self.rng, *self.backoff)
                logger.warning(
                    "change stream failed (%s: %s); retry %d in %.2f s (%d failures since open)",
                    type(exc).__name__,
                    exc,
                    self.consecutive_failures,
                    delay,
                    self.failures,
                )
                await self._forget_lost_history(exc)
                await asyncio.sleep(delay)

    async def _follow(self) -> None:
        doc = await self.db.checkpoints.find_one(b.by_id(FEED_CHECKPOINT))
        token = doc.get("resume_token") if doc else None
        async with await self.db.watch(change_stream_pipeline(), **watch_options(token)) as stream:
            self.streams_opened += 1
            if self.consecutive_failures:
                logger.warning(
                    "change stream open again after %d failed attempts (%d since open)",
                    self.consecutive_failures,
                    self.failures,
                )
            self.consecutive_failures = 0
            self.feed.publish(EVERYTHING)  # whatever happened while no stream was open
            loop = asyncio.get_running_loop()
            saved_at = loop.time()
            unsaved = False
            while True:
                change = await stream.try_next()  # None after an idle await period
                if change is None and not stream.alive:
                    raise StreamClosed("the change stream was invalidated or closed")
                if change is not None:
                    self.feed.publish(wake_from_change(change))
                    unsaved = True
                if unsaved and loop.time() - saved_at >= TOKEN_SAVE_INTERVAL_S:
                    await self.db.checkpoints.update_one(
                        b.by_id(FEED_CHECKPOINT),
                        b.checkpoint_update(0, None, stream.resume_token),
                        upsert=True,
                    )
                    saved_at, unsaved = loop.time(), False

    async def _forget_lost_history(self, exc: Exception) -> None:
        """A token the oplog no longer holds cannot resume: drop it (the next stream
        starts now; the lanes scan the database on the `EVERYTHING` it publishes)."""
        from pymongo.errors import OperationFailure, PyMongoError

        if isinstance(exc, OperationFailure) and exc.code in HISTORY_LOST_CODES:
            logger.warning(
                "change stream resume token is no longer in the oplog; "
                "falling back to a catch-up scan"
            )
            try:
                await self.db.checkpoints.delete_one(b.by_id(FEED_CHECKPOINT))
            except PyMongoError as again:
                logger.warning("could not drop the lost resume token (%s)", again)
