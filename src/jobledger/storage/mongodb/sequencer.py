"""Positions for committed events, given after commit (decisions D15, D41).

Business and lane transactions insert their events `pending` (no position): they write
only their own documents. A sequencing step is one engine transaction (snapshot read
concern, majority write concern, on the primary) and **one attempt**:

1. `$inc` the head document `sequencer._id = "events"` first. Two steps write the same
   document, so the second one gets a write conflict at once (a transaction never waits
   for another's write) and gives way: its reader goes on with the published mark.
   Steps therefore commit one after the other, each numbering from the mark the
   previous one wrote.
2. Read up to `batch` pending events in (stream, version) order from the partial
   `pending` index and give them consecutive positions after the mark
   (`sequencing.assign_positions`), removing their `pending` flag.
3. Write the new high-water mark in the head document.

The transaction reads the newest data on the primary, not a majority snapshot; its
`w: majority` commit is what makes the step durable, and it can be acknowledged only
once everything the step read is majority-committed too (the oplog is ordered): a
step never gives a position to an event a failover rolls back, or else it is rolled
back with it.

A step's write on the head document is held until it commits or aborts. A pod killed
in the middle of a step leaves it held until the server aborts the transaction
(`transactionLifetimeLimitSeconds`, 60 s, found by a sweep that runs every
min(60, limit / 2) s: at most 90 s at the defaults). Meanwhile every other step gives
way at once, readers return the log up to the published mark without waiting, and
events committed since then get their positions when the server has aborted it.

A reader (`MongoStore.read_log`) calls `catch_up()` — steps while an event is pending —
then reads the mark and the events up to it in one snapshot (`high_water(session)`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from pymongo import ReturnDocument, UpdateOne
from pymongo.asynchronous.client_session import AsyncClientSession

from jobledger.storage.mongodb import builders as b
from jobledger.storage.mongodb.codec import Database
from jobledger.storage.mongodb.sequencing import Pending, assign_positions

STEP_BATCH = 1000

StepBody = Callable[[AsyncClientSession], Awaitable[int]]
#: runs a step's body once in a transaction: its result, or None when it met a conflict
Attempt = Callable[[StepBody], Awaitable[int | None]]


class Sequencer:
    def __init__(self, db: Database, attempt: Attempt, *, batch: int = STEP_BATCH) -> None:
        self.db = db
        self.attempt = attempt
        self.batch = batch
        self.gave_way = 0  # steps that met another step's write on the head document
        # one step at a time per store: a pod's readers wait for its own step (which
        # commits in a few round trips) rather than conflict with it
        self._serial = asyncio.Lock()

    async def step(self) -> int | None:
        """One sequencing step: how many events it positioned, or None when it met
        another step's write on the head document and gave way."""

        async def body(session: AsyncClientSession) -> int:
            query, update = b.step_start()
            head = await self.db.sequencer.find_one_and_update(
                query, update, upsert=True, return_document=ReturnDocument.AFTER, session=session
            )
            # upsert with ReturnDocument.AFTER always returns the document
            high_water = int(head.get("high_water", 0)) if head else 0
            flt, projection, sort = b.pending_query()
            cursor = self.db.events.find(flt, projection, session=session)
            cursor = cursor.sort(sort).hint(b.PENDING_INDEX).limit(self.batch)
            pending = [Pending(d["_id"], d["stream"], int(d["version"])) async for d in cursor]
            if not pending:
                return 0
            assigned, new_high = assign_positions(high_water, pending)
            updates = [UpdateOne(*b.position_update(i, p)) for i, p in assigned]
            await self.db.events.bulk_write(updates, ordered=True, session=session)
            query, update = b.step_finish(new_high)
            await self.db.sequencer.update_one(query, update, session=session)
            return len(assigned)

        done = await self.attempt(body)
        if done is None:
            self.gave_way += 1
        return done

    async def any_pending(self) -> bool:
        """Whether an event waits for its position: one entry of the `pending` index
        (the sort on its keys and the hint make the planner scan it, not the
        collection, although the filter names none of its keys)."""
        flt, projection, sort = b.pending_query()
        found = await self.db.events.find_one(flt, projection, sort=sort, hint=b.PENDING_INDEX)
        return found is not None

    async def catch_up(self) -> None:
        """Position the events committed before this call, unless another pod's step
        holds the head document (then they get their positions from that step or a
        later one). Nothing pending — an idle log — costs one index entry read."""
        async with self._serial:
            while await self.any_pending():
                done = await self.step()
                if done is None or done < self.batch:
                    return

    async def high_water(self, session: AsyncClientSession) -> int:
        """The published mark, read in `session` (the reader's snapshot)."""
        head = await self.db.sequencer.find_one(b.by_id(b.HEAD_ID), session=session)
        return int(head.get("high_water", 0)) if head else 0
