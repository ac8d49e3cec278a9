"""Every document the MongoDB adapter would write for a real workload, through BSON.

The audit workload (tests/contract/projections/test_replay_workload.py: every kind of job
transition, fast and long lanes, retries, DEAD, skips, take-overs, reclaims) and a
schedule's life run on the memory store, which records each `Change` the engine hands
to a store. Each change is then written the way the MongoDB adapter writes it: its
documents (`builders.py`) encoded with `bson.encode` and decoded with the store's
codec options, the `$set` of an update merged into the stored document as the server
merges it. What comes back must be the engine's rows and events, hash for hash; and
the stats checkpoint of that log must come back as saved.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import bson

from jobledger.core.clock import FakeClock
from jobledger.domain.chain import verify_chain
from jobledger.domain.events import Event
from jobledger.domain.jobs import Change, Job, Stamp
from jobledger.domain.schedules import commands
from jobledger.domain.schedules.row import MissedSlotPolicy, Schedule
from jobledger.domain.schedules.spec import ScheduleSpec
from jobledger.projections.stats import STATS, catch_up_stats
from jobledger.storage.memory import MemoryStore
from jobledger.storage.memory.writes import MemoryWrites
from jobledger.storage.mongodb import builders as b
from jobledger.storage.mongodb.codec import CODEC
from jobledger.storage.port import LeaseGuard
from tests.contract.projections.test_replay_workload import generate


def _bson(doc: Any) -> Any:
    return bson.decode(bson.encode({"v": doc}), codec_options=CODEC)["v"]


class RecordingWrites(MemoryWrites):
    """The memory store's writes, keeping every change they were asked to write."""

    changes: list[Change]

    async def append_in(self, tx: Any, changes: Sequence[Change]) -> list[bool]:
        self.changes.extend(changes)
        return await super().append_in(tx, changes)

    async def apply(
        self, changes: Sequence[Change], *, guard: LeaseGuard | None = None
    ) -> list[bool]:
        self.changes.extend(changes)
        return await super().apply(changes, guard=guard)


class RecordingStore(MemoryStore):
    """The memory store, keeping every change it was asked to write, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = RecordingWrites(self.tables, self.writes.wakes)
        self.changes: list[Change] = []
        self.writes.changes = self.changes


class BsonCollections:
    """What the MongoDB adapter's writes leave on a server: BSON documents by `_id`."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []

    def write(self, change: Change) -> None:
        key = f"{b.collection_of(change)}/{b.row_id(change)}"
        for event in change.events:
            self.events.append(_bson(b.event_doc(event)))
        if change.is_new:
            if change.row is not None:
                self.rows[key] = _bson(b.row_document(change))
            return
        query = _bson(b.cas_query(change))
        stored = self.rows[key]
        assert stored["_id"] == query["_id"] and stored["stream_version"] == query["stream_version"]
        if change.row is None:
            del self.rows[key]
            return
        conflict = b.running_code_conflict_query(change)
        if conflict is not None:
            assert _bson(conflict) == conflict
        stored.update(_bson(b.row_update(change))["$set"])  # what the server's $set does

    def row(self, change: Change) -> Job | Schedule:
        doc = self.rows[f"{b.collection_of(change)}/{b.row_id(change)}"]
        if b.collection_of(change) == "jobs":
            return b.job_from_doc(doc)
        return b.schedule_from_doc(doc)


def _schedule_changes(now: datetime) -> list[Change]:
    spec = ScheduleSpec(
        "nightly.report", "0 2 * * *", "Europe/Berlin", MissedSlotPolicy.RUN_ONCE, 1
    )
    made = [commands.declared(spec, Stamp(now, None, "t-1"))]
    steps = (
        lambda row, stamp: commands.disabled(row, stamp),
        lambda row, stamp: commands.override_set(row, "30 3 * * 1-5", stamp),
        lambda row, stamp: commands.enabled(row, stamp),
        lambda row, stamp: commands.override_cleared(row, stamp),
    )
    for n, step in enumerate(steps, start=1):
        row = made[-1].row
        assert isinstance(row, Schedule)
        change = step(row, Stamp(now + timedelta(seconds=n), None, None))
        assert change is not None
        made.append(change)
    return made


async def test_a_workload_written_as_the_adapter_writes_it_reads_back_exactly() -> None:
    store = RecordingStore()
    clock = FakeClock(datetime(2026, 3, 2, 9, 0, 0, 123000, tzinfo=UTC))
    workload = await generate(store, clock, jobs_count=24)
    store.changes.extend(_schedule_changes(clock.now()))
    server = BsonCollections()
    for change in store.changes:
        server.write(change)
        if change.row is not None:
            assert server.row(change) == change.row, change.stream
    open_jobs = {doc["_id"] for key, doc in server.rows.items() if key.startswith("jobs/")}
    assert open_jobs == set(workload.open_rows)
    events = [b.event_from_doc(doc) for doc in server.events]
    sent = [e for c in store.changes for e in c.events]
    assert events == sent and len(events) == workload.events + 5
    assert len({e.type for e in events}) >= 14  # every kind of transition went through
    by_stream: dict[str, list[Event]] = {}
    for event in events:
        by_stream.setdefault(event.stream, []).append(event)
    assert all(verify_chain(chain) == [] for chain in by_stream.values())


async def test_the_stats_checkpoint_of_a_workload_comes_back_as_saved() -> None:
    store = MemoryStore()
    clock = FakeClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    await generate(store, clock, jobs_count=16)
    await catch_up_stats(store)
    position, state = await store.projections.load_checkpoint(STATS)
    assert state["open"] and state["hours"]
    update = b.checkpoint_update(position, state)
    stored = _bson({"_id": STATS, **update["$set"]})
    assert b.checkpoint_from_doc(stored) == (position, state)
