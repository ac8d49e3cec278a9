"""The MongoDB log sequencing rules (storage/mongodb/sequencing.py) on a model database.

The model keeps what the argument in docs/decisions.md D15 and D41 relies on:
transactions are atomic and see a snapshot; a write to a document another transaction
wrote since the snapshot, or holds uncommitted, aborts (MongoDB's write conflict); a
stream's version v+1 is written only by a transaction that saw version v committed.
Hypothesis drives interleavings of business commits, sequencing steps that start,
commit, race or crash, a step whose pod died holding the head document until the server
aborts it, and readers that follow the prefix rule; no reader may skip or reorder an
event, and no reader waits for the held head.

The sequencer's own control flow (one attempt, then the published mark) and the shape
of its reads (the `pending` index scanned, not the collection) are checked on
recording fakes below: no server runs here.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

from hypothesis import given, settings
from hypothesis import strategies as st

from jobledger.storage.mongodb import builders as b
from jobledger.storage.mongodb import indexes as ix
from jobledger.storage.mongodb.sequencer import Sequencer, StepBody
from jobledger.storage.mongodb.sequencing import (
    Pending,
    assign_positions,
    log_window,
    order_for_positions,
)


def test_order_keeps_each_streams_versions_ascending_and_drops_duplicates() -> None:
    seen = [
        Pending("b2", "job:b", 2),
        Pending("a1", "job:a", 1),
        Pending("b1", "job:b", 1),
        Pending("a1", "job:a", 1),
    ]
    assert [p.id for p in order_for_positions(seen)] == ["a1", "b1", "b2"]


def test_assign_numbers_every_pending_event_after_the_mark_without_gaps() -> None:
    seen = [Pending("c1", "job:c", 1), Pending("a2", "job:a", 2), Pending("a1", "job:a", 1)]
    assigned, high = assign_positions(41, seen)
    assert assigned == [("a1", 42), ("a2", 43), ("c1", 44)]
    assert high == 44
    assert assign_positions(44, []) == ([], 44)


def test_log_window_is_empty_until_the_high_water_mark_passes_the_reader() -> None:
    assert log_window(10, 10) is None
    assert log_window(10, 9) is None
    assert log_window(10, 14) == (10, 14)


@dataclass
class Doc:
    id: str
    stream: str
    version: int
    position: int | None = None


@dataclass
class Step:
    """A sequencing step that has read its snapshot and not yet committed."""

    head_version: int
    high_water: int
    pending: list[Pending]


@dataclass
class Model:
    docs: dict[str, Doc] = field(default_factory=dict)
    high_water: int = 0
    head_version: int = 0  # bumped by every committed step: the write-conflict check
    streams: dict[str, int] = field(default_factory=dict)
    aborted_steps: int = 0
    held: bool = False  # a dead pod's step holds the head document, uncommitted

    def commit_business(self, streams: list[str]) -> None:
        """One transaction appending the next version of each stream: it inserts only
        documents of its own (a business transaction never writes a shared document)."""
        for stream in streams:
            version = self.streams.get(stream, 0) + 1
            self.streams[stream] = version
            doc_id = f"{stream}/{version}"
            assert doc_id not in self.docs
            self.docs[doc_id] = Doc(doc_id, stream, version)

    def start_step(self) -> Step:
        pending = [Pending(d.id, d.stream, d.version) for d in self.docs.values()]
        pending = [p for p in pending if self.docs[p.id].position is None]
        return Step(self.head_version, self.high_water, pending)

    def commit_step(self, step: Step) -> None:
        if self.held or step.head_version != self.head_version:
            # its first write meets the held head, or another step wrote it since: the
            # step gives way (one attempt) and its reader reads the published mark
            self.aborted_steps += 1
            return
        # every event of the step's snapshot is still pending: a step that positioned
        # one since would have bumped head_version
        assert all(self.docs[p.id].position is None for p in step.pending)
        assigned, high = assign_positions(step.high_water, step.pending)
        for doc_id, position in assigned:
            self.docs[doc_id].position = position
        self.high_water = high
        self.head_version += 1

    def read(self, after: int) -> list[Doc]:
        """A reader: the high-water mark first, then the positioned events in its window."""
        window = log_window(after, self.high_water)
        if window is None:
            return []
        low, high = window
        found = [d for d in self.docs.values() if d.position is not None]
        return sorted(
            (d for d in found if low < (d.position or 0) <= high), key=lambda d: d.position or 0
        )


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("commit"), st.lists(st.sampled_from("abcde"), min_size=1, max_size=3)),
        st.tuples(st.just("start"), st.just(0)),
        st.tuples(st.just("finish"), st.integers(0, 3)),
        st.tuples(st.just("crash"), st.integers(0, 3)),
        st.tuples(st.just("read"), st.integers(0, 2)),
        st.tuples(st.just("hold"), st.just(0)),  # a pod dies in the middle of its step
        st.tuples(st.just("reap"), st.just(0)),  # the server aborts that transaction
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_no_reader_skips_or_reorders_under_any_interleaving(ops: list[tuple[str, object]]) -> None:
    model = Model()
    steps: list[Step] = []
    readers = [0, 0, 0]
    seen: list[list[Doc]] = [[], [], []]
    for op, arg in ops:
        if op == "commit":
            assert isinstance(arg, list)
            model.commit_business([f"job:{s}" for s in dict.fromkeys(arg)])
        elif op == "start":
            steps.append(model.start_step())
        elif op == "hold":
            model.held = True
        elif op == "reap":
            model.held = False
        elif op in ("finish", "crash") and steps:
            assert isinstance(arg, int)
            step = steps.pop(arg % len(steps))
            if op == "finish":
                model.commit_step(step)
        elif op == "read":
            assert isinstance(arg, int)
            got = model.read(readers[arg])
            # gap-free: exactly the positions after the reader's checkpoint
            assert [d.position for d in got] == list(range(readers[arg] + 1, model.high_water + 1))
            if got:
                readers[arg] = got[-1].position or 0
            seen[arg].extend(got)
    # whatever crashed or was held, the next step after the server's abort positions
    # everything still pending
    model.held = False
    model.commit_step(model.start_step())
    everything = model.read(0)
    assert all(d.position is not None for d in model.docs.values())
    assert [d.position for d in everything] == list(range(1, len(model.docs) + 1))
    for stream in model.streams:
        versions = [d.version for d in everything if d.stream == stream]
        assert versions == sorted(versions)
    for reader in range(3):
        # a reader's view is a prefix of the final log: nothing it saw moved or vanished
        assert [d.id for d in seen[reader]] == [d.id for d in everything][: len(seen[reader])]


# --- the sequencer's control flow and reads, on recording fakes ---------------------------


class Events:
    """The `events` collection as `any_pending` reads it: records each find_one."""

    def __init__(self, pending: bool) -> None:
        self.pending = pending
        self.reads: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    async def find_one(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        self.reads.append((args, kwargs))
        return {"_id": "job:a/1", "stream": "job:a", "version": 1} if self.pending else None


class Db:
    def __init__(self, pending: bool) -> None:
        self.events = Events(pending)


def uses_index(spec: ix.IndexSpec, flt: dict[str, Any], sort: Any, hint: Any) -> bool:
    """Whether the planner may answer (flt, sort) from `spec` and is told to: the
    filter implies the index's partial filter, and the index is hinted, or its first
    key is in the filter, or the sort is its keys' prefix (the planner considers an
    index only for a predicate on its first key or for the sort it gives)."""
    partial = spec.options.get("partialFilterExpression", {})
    if not partial.items() <= flt.items():
        return False
    keys = list(spec.keys)
    sorted_by_index = bool(sort) and list(sort) == keys[: len(sort)]
    return hint == spec.name or keys[0][0] in flt or sorted_by_index


def test_the_pending_probe_reads_the_pending_index_not_the_collection() -> None:
    """`catch_up` asks whether anything is pending before every read of the log: a
    filter on `pending` alone names no key of the (stream, version) index, so without
    the sort on those keys (and the hint) the planner scans the whole collection."""
    db = Db(pending=False)
    sequencer = Sequencer(cast(Any, db), _never_called)
    assert asyncio.run(sequencer.any_pending()) is False
    ((args, kwargs),) = db.events.reads
    flt, projection = args
    pending_index = ix.current_indexes()["events", b.PENDING_INDEX]
    assert uses_index(pending_index, flt, kwargs.get("sort"), kwargs.get("hint"))
    assert kwargs["sort"] == pending_index.keys and kwargs["hint"] == pending_index.name
    assert not uses_index(pending_index, flt, None, None)  # the old probe's shape
    assert projection == {"stream": 1, "version": 1}


def test_the_highest_position_read_walks_the_position_index_backwards() -> None:
    flt, sort = b.highest_position_query()
    position = ix.current_indexes()["events", "position"]
    assert uses_index(position, flt, [("position", 1)], "position")
    assert sort == [("position", -1)]


async def _never_called(body: StepBody) -> int | None:
    raise AssertionError("no step when nothing is pending")


def test_catch_up_makes_one_attempt_and_gives_way_on_a_conflict() -> None:
    """Another step holds the head document (a killed pod's, until the server aborts
    it): the step is one attempt, and `catch_up` returns, so the reader goes on with
    the published mark instead of waiting."""
    attempts: list[StepBody] = []

    async def conflicted(body: StepBody) -> int | None:
        attempts.append(body)
        return None  # transactions.one_attempt's answer to a write conflict

    sequencer = Sequencer(cast(Any, Db(pending=True)), conflicted)
    asyncio.run(sequencer.catch_up())
    assert len(attempts) == 1 and sequencer.gave_way == 1


def test_catch_up_steps_until_a_step_takes_less_than_a_batch() -> None:
    done = iter([3, 3, 1])
    attempts: list[StepBody] = []

    async def stepped(body: StepBody) -> int | None:
        attempts.append(body)
        return next(done)

    sequencer = Sequencer(cast(Any, Db(pending=True)), stepped, batch=3)
    asyncio.run(sequencer.catch_up())
    assert len(attempts) == 3 and sequencer.gave_way == 0


def test_a_stores_readers_take_turns_instead_of_conflicting() -> None:
    """Two readers of one store: the second waits for the first's step (a few round
    trips) rather than meeting its write on the head document and giving way."""
    running = 0
    overlapped = False

    async def step(body: StepBody) -> int | None:
        nonlocal running, overlapped
        running += 1
        overlapped = overlapped or running > 1
        await asyncio.sleep(0.01)
        running -= 1
        return 0

    async def two_readers() -> None:
        sequencer = Sequencer(cast(Any, Db(pending=True)), step)
        await asyncio.gather(sequencer.catch_up(), sequencer.catch_up())

    asyncio.run(two_readers())
    assert not overlapped
