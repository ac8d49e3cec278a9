"""`apply_state` (replay's in-place fold) gives the rows `apply` gives, event by event,
and refuses what `apply` refuses with the same error, leaving its state as it was."""

from __future__ import annotations

import copy
from collections import defaultdict
from dataclasses import replace
from typing import Any

from jobledger.core.clock import FakeClock
from jobledger.domain.events import Event, EventType
from jobledger.domain.jobs import Job, JobState, apply, apply_state
from jobledger.storage.memory import MemoryStore
from tests.contract.projections.test_replay_workload import generate


def _outcome(fold: Any, row: Any, event: Event) -> tuple[str, Any]:
    try:
        return "row", fold(row, event)
    except (ValueError, KeyError) as exc:
        return "error", (type(exc), str(exc))


def _as_job(state: JobState | None) -> Job | None:
    return None if state is None else Job(**state)


async def test_every_transition_of_the_workload_folds_alike(clock: FakeClock) -> None:
    store = MemoryStore()
    await generate(store, clock, jobs_count=64)
    streams: dict[str, list[Event]] = defaultdict(list)
    for event in store.tables.events:
        streams[event.stream].append(event)
    kinds: set[str] = set()
    for events in streams.values():
        job: Job | None = None
        state: JobState | None = None
        for event in events:
            kinds.add(event.type)
            job = apply(job, event)
            state = apply_state(state, event)
            assert _as_job(state) == job
    assert kinds >= {
        EventType.JOB_ENQUEUED,
        EventType.JOB_DISPATCHED,
        EventType.JOB_CLAIMED,
        EventType.JOB_LEASE_RENEWED,
        EventType.JOB_SUCCEEDED,
        EventType.JOB_FAILED,
        EventType.JOB_DEFERRED,
        EventType.JOB_REQUEUED,
        EventType.JOB_DEAD,
        EventType.JOB_RETRIED,
        EventType.JOB_SKIPPED,
        EventType.JOB_CANCELLED,
    }


async def test_a_refused_event_raises_alike_and_leaves_the_state(clock: FakeClock) -> None:
    store = MemoryStore()
    await generate(store, clock, jobs_count=8)
    enqueued = next(e for e in store.tables.events if e.type == EventType.JOB_ENQUEUED)
    dead = next(e for e in store.tables.events if e.type == EventType.JOB_DEAD)
    row = apply(None, enqueued)
    assert row is not None
    cases: list[tuple[Job | None, Event]] = [
        (None, dead),  # before JobEnqueued
        (row, enqueued),  # enqueued twice
        (row, replace(dead, type="JobTeleported")),  # unknown
        (row, replace(dead, type=EventType.JOB_CLAIMED, data={"pod": "p"})),  # no token
        (row, replace(dead, type=EventType.JOB_REDELIVERED)),  # while open: unknown here
        (None, replace(enqueued, data={**enqueued.data, "lane": "sideways"})),
    ]
    for before, event in cases:
        state = None if before is None else dict(vars_of(before))
        kept = copy.deepcopy(state)
        expected = _outcome(apply, before, event)
        got = _outcome(apply_state, state, event)
        assert expected[0] == "error", event.type
        assert got == expected
        assert state == kept


def vars_of(job: Job) -> dict[str, Any]:
    return {name: getattr(job, name) for name in Job.__dataclass_fields__}


async def test_after_the_row_left_a_redelivery_keeps_it_closed(clock: FakeClock) -> None:
    store = MemoryStore()
    await generate(store, clock, jobs_count=8)
    left = next(e for e in store.tables.events if e.type == EventType.JOB_SUCCEEDED)
    redelivered = replace(left, type=EventType.JOB_REDELIVERED, version=left.version + 1)
    assert apply(None, redelivered) is None and apply_state(None, redelivered) is None
    again = replace(left, version=left.version + 2)  # succeeded once more: refused alike
    assert _outcome(apply, None, again)[0] == "error"
    assert _outcome(apply, None, again) == _outcome(apply_state, None, again)
