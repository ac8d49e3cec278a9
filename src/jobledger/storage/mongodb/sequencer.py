"""Positions for committed events, given after commit (decisions D15).

Business and lane transactions insert their events `pending` (no position): they write
only their own documents. A sequencing step, in one engine transaction (snapshot read
concern — a majority-committed snapshot — and majority write concern):

1. `$inc`s the head document `sequencer._id = "events"` first: two steps write the same
   document, so one of them gets a write conflict and is retried by `with_transaction`
   from a fresh snapshot; steps are serial and each numbers from the previous mark;
2. reads up to `batch` pending events in (stream, version) order (the `pending`
   partial index) and gives them consecutive positions after the high-water mark
   (`sequencing.assign_positions`), removing their `pending` flag;
3. writes the new high-water mark in the head document.

Only steps write the head document; no business transaction touches it. A reader
(`read_log`) calls `catch_up()` — run steps while events are pending, then read the
mark with majority read concern — and reads positions up to the mark only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pymongo import ReturnDocument, UpdateOne
from pymongo.asynchronous.client_session import AsyncClientSession

from jobledger.storage.mongodb import builders as b
from jobledger.storage.mongodb.codec import Database, majority
from jobledger.storage.mongodb.sequencing import Pending, assign_positions

STEP_BATCH = 1000

InTransaction = Callable[[Callable[[AsyncClientSession], Awaitable[Any]]], Awaitable[Any]]


class Sequencer:
    def __init__(
        self, db: Database, in_transaction: InTransaction, *, batch: int = STEP_BATCH
    ) -> None:
        self.db = db
        self.in_transaction = in_transaction
        self.batch = batch

    async def step(self) -> tuple[int, int]:
        """One sequencing step: (events positioned, the high-water mark after it)."""

        async def body(session: AsyncClientSession) -> tuple[int, int]:
            query, update = b.step_start()
            head = await self.db.sequencer.find_one_and_update(
                query, update, upsert=True, return_document=ReturnDocument.AFTER, session=session
            )
            # upsert with ReturnDocument.AFTER always returns the document
            high_water = int(head.get("high_water", 0)) if head else 0
            flt, projection, sort = b.pending_query()
            cursor = self.db.events.find(flt, projection, session=session).sort(sort)
            pending = [
                Pending(d["_id"], d["stream"], int(d["version"]))
                async for d in cursor.limit(self.batch)
            ]
            if not pending:
                return 0, high_water
            assigned, new_high = assign_positions(high_water, pending, {p.id for p in pending})
            updates = [UpdateOne(*b.position_update(i, p)) for i, p in assigned]
            await self.db.events.bulk_write(updates, ordered=True, session=session)
            query, update = b.step_finish(new_high)
            await self.db.sequencer.update_one(query, update, session=session)
            return len(assigned), new_high

        done, high_water = await self.in_transaction(body)
        return int(done), int(high_water)

    async def high_water(self) -> int:
        """The mark, read with majority read concern (what a failover cannot roll back)."""
        head = await majority(self.db.sequencer).find_one(b.by_id(b.HEAD_ID))
        return int(head.get("high_water", 0)) if head else 0

    async def catch_up(self) -> int:
        """Position every event committed before this call; return the high-water mark.

        Nothing pending (the common case for an idle log): one indexed read, no write.
        """
        flt, _, _ = b.pending_query()
        while await majority(self.db.events).find_one(flt, b.fields()):
            done, _ = await self.step()
            if done < self.batch:
                break
        return await self.high_water()
