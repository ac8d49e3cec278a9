"""Replay's report on the memory store: log problems, the refusal to apply over them,
and the wording auditors read."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from jobledger.cli import main
from jobledger.core.clock import FakeClock
from jobledger.domain.events import EventType, new_event
from jobledger.projections.replay import EXTRA, FIELD, MISSING, Difference, compare_rows, replay
from jobledger.storage.memory import MemoryStore
from tests.contract.projections.test_replay_workload import generate


async def test_an_event_the_fold_rejects_is_a_problem_and_blocks_apply(clock: FakeClock) -> None:
    store = MemoryStore()
    await generate(store, clock, jobs_count=8)
    stray = new_event(
        "job:" + "e" * 32,
        1,
        EventType.JOB_SUCCEEDED,
        {"attempts": 0},
        at=clock.now(),
        actor=None,
        trace_id=None,
        prev_hash="",
    )
    store.tables.events.append(replace(stray, position=len(store.tables.events) + 1))
    victim = next(iter(store.tables.jobs.values()))
    store.tables.jobs[victim.id] = replace(victim, attempts=7)

    report = await replay(store, apply=True)
    assert report.problems == [
        f"job:{'e' * 32} v1 JobSucceeded (position {len(store.tables.events)}):"
        f" cannot fold: job:{'e' * 32} v1: JobSucceeded before JobEnqueued"
    ]
    assert [d.field for d in report.differences] == ["attempts"]
    assert not report.applied and not report.ok
    assert store.tables.jobs[victim.id].attempts == 7  # nothing swapped over a broken log
    assert report.lines()[-1] == "1 differences, 1 log problems"


def test_rows_are_compared_field_by_field_in_key_order() -> None:
    t = datetime(2026, 3, 2, tzinfo=UTC)
    a, b = (1, "x"), (1, "y")
    diffs = compare_rows("jobs", {"2": a, "1": "live"}, {"2": b, "3": "log"})
    assert [(d.key, d.kind) for d in diffs] == [("1", EXTRA), ("2", FIELD), ("3", MISSING)]
    assert diffs[1] == Difference("jobs", "2", FIELD, "row", a, b)
    text = Difference("jobs", "j1", FIELD, "next_run_at", t, None).describe()
    assert text == f"jobs j1: next_run_at is {t!r} live, None from the log"
    long = Difference("jobs", "j1", FIELD, "payload", "x" * 500, "y").describe()
    assert len(long) < 300 and "…" in long


async def test_the_replay_command_on_an_empty_store(capsys: pytest.CaptureFixture[str]) -> None:
    assert await asyncio.to_thread(main, ["--store", "memory://", "replay"]) == 0
    out = capsys.readouterr().out
    assert "replayed 0 events up to position 0: 0 open jobs, 0 schedules" in out
    assert out.rstrip().endswith("read models match the log")


async def test_a_stream_whose_positions_run_against_its_versions(clock: FakeClock) -> None:
    """Replay folds each stream in its chain's (version) order; `--apply`'s rebuild reads
    the log in position order, so it refuses a log edited that way, and says why."""
    store = MemoryStore()
    await generate(store, clock, jobs_count=8)
    at = next(i for i, e in enumerate(store.tables.events) if e.type == EventType.JOB_DISPATCHED)
    dispatched = store.tables.events[at]
    first = next(i for i, e in enumerate(store.tables.events) if e.stream == dispatched.stream)
    enqueued = store.tables.events[first]  # v1, earlier in the log: swap the two events' places
    store.tables.events[first] = replace(dispatched, position=enqueued.position)
    store.tables.events[at] = replace(enqueued, position=dispatched.position)
    victim = next(iter(store.tables.jobs.values()))
    store.tables.jobs[victim.id] = replace(victim, attempts=7)

    report = await replay(store)
    assert report.problems == [] and [d.field for d in report.differences] == ["attempts"]
    applied = await replay(store, apply=True)
    assert not applied.applied and store.tables.jobs[victim.id].attempts == 7
    assert applied.problems and "before JobEnqueued" in applied.problems[0]
