"""The MongoDB log sequencing rules (storage/mongodb/sequencing.py) on a model database.

The model keeps what the argument in docs/decisions.md D15 relies on: transactions are
atomic and see a snapshot; a write to a document another transaction wrote since the
snapshot aborts (MongoDB's write conflict); a stream's version v+1 is written only by a
transaction that saw version v committed. Hypothesis drives interleavings of business
commits, sequencing steps that start, commit, race, crash or see duplicates, and
readers that follow the prefix rule; no reader may skip or reorder an event.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_assign_numbers_only_still_pending_events_without_gaps() -> None:
    seen = [Pending("a1", "job:a", 1), Pending("a2", "job:a", 2), Pending("c1", "job:c", 1)]
    assigned, high = assign_positions(41, seen, still_pending={"a2", "c1"})
    assert assigned == [("a2", 42), ("c1", 43)]
    assert high == 43
    assert assign_positions(43, seen, still_pending=set()) == ([], 43)


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

    def commit_business(self, streams: list[str]) -> None:
        """One transaction appending the next version of each stream: it inserts only
        documents of its own (a business transaction never writes a shared document)."""
        for stream in streams:
            version = self.streams.get(stream, 0) + 1
            self.streams[stream] = version
            doc_id = f"{stream}/{version}"
            assert doc_id not in self.docs
            self.docs[doc_id] = Doc(doc_id, stream, version)

    def start_step(self, duplicate: bool) -> Step:
        pending = [Pending(d.id, d.stream, d.version) for d in self.docs.values()]
        pending = [p for p in pending if self.docs[p.id].position is None]
        if duplicate:  # a sighting delivered twice, and one of an event already positioned
            pending += pending[:1]
            pending += [Pending(d.id, d.stream, d.version) for d in self.docs.values()][:1]
        return Step(self.head_version, self.high_water, pending)

    def commit_step(self, step: Step) -> None:
        if step.head_version != self.head_version:  # another step wrote the head since
            self.aborted_steps += 1
            return
        # the step's snapshot saw exactly its own pending set
        still = {p.id for p in step.pending if self.docs[p.id].position is None}
        assigned, high = assign_positions(step.high_water, step.pending, still)
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
        st.tuples(st.just("start"), st.booleans()),
        st.tuples(st.just("finish"), st.integers(0, 3)),
        st.tuples(st.just("crash"), st.integers(0, 3)),
        st.tuples(st.just("read"), st.integers(0, 2)),
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
            steps.append(model.start_step(duplicate=bool(arg)))
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
    # whatever crashed, the next step positions everything still pending
    model.commit_step(model.start_step(duplicate=True))
    everything = model.read(0)
    assert all(d.position is not None for d in model.docs.values())
    assert [d.position for d in everything] == list(range(1, len(model.docs) + 1))
    for stream in model.streams:
        versions = [d.version for d in everything if d.stream == stream]
        assert versions == sorted(versions)
    for reader in range(3):
        # a reader's view is a prefix of the final log: nothing it saw moved or vanished
        assert [d.id for d in seen[reader]] == [d.id for d in everything][: len(seen[reader])]
