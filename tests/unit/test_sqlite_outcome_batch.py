"""The SQLite store's outcome batches (`writes.apply_group`): the rows go in as one JSON
array per statement, and what JSON cannot carry exactly takes the bound-parameter way;
either way the rows and the log are exactly what the changes say."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobledger.config.settings import Settings
from jobledger.core.clock import FakeClock
from jobledger.domain.chain import verify_chain
from jobledger.domain.jobs import Change, Job
from jobledger.engine import Engine
from jobledger.reactors.commit import MAX_COMMIT_CHANGES
from jobledger.reactors.runtime import Runtime
from jobledger.storage.sqlite import SqliteStore
from jobledger.storage.sqlite.writes import json_array
from tests.contract.helpers import FAST, dispatch, enqueue, kill, register_targets, succeed

#: text JSON must carry exactly: quotes, backslashes, control characters, non-BMP
AWKWARD = 'a "quoted" \\ back\\slash\nnew line\ttab \x01\x1f é ✓ 😀 </script>'


@pytest.fixture
async def engine(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Engine]:
    store = SqliteStore(str(tmp_path / "jobs.db"), watch_interval=3600)
    await store.open()
    built = Engine(store, clock=clock, settings=Settings())
    register_targets(built)
    try:
        yield built
    finally:
        await store.close()


def _with_error(change: Change, error: str) -> Change:
    row = change.row
    assert isinstance(row, Job)
    return dataclasses.replace(change, row=dataclasses.replace(row, last_error=error))


async def _apply_batch(engine: Engine, clock: FakeClock, error: str) -> None:
    """One batch of every kind the group path writes (a delete, updates), checked."""
    done, dead, marked = [await enqueue(engine, FAST, key=f"k{i}") for i in range(3)]
    changes = [succeed(done, clock), _with_error(kill(dead, clock), error), dispatch(marked, clock)]
    store = engine.store
    assert await store.writes.apply(changes) == [True, True, True]
    assert await store.admin.get_job(done.id) is None
    assert await store.admin.get_job(dead.id) == changes[1].row
    assert await store.admin.get_job(marked.id) == changes[2].row
    for job, change in zip((done, dead, marked), changes, strict=True):
        log = await store.log.read_stream(f"job:{job.id}")
        assert log[-len(change.events) :] == list(change.events)
        assert verify_chain(log) == []


async def test_a_batch_through_json_stores_every_value_exactly(
    engine: Engine, clock: FakeClock
) -> None:
    await _apply_batch(engine, clock, AWKWARD)


async def test_a_batch_json_cannot_carry_takes_bound_parameters(
    engine: Engine, clock: FakeClock
) -> None:
    await _apply_batch(engine, clock, "before\x00after")


async def test_a_batch_keeps_the_order_of_its_events_in_the_log(
    engine: Engine, clock: FakeClock
) -> None:
    jobs = [await enqueue(engine, FAST, key=f"o{i}") for i in range(50)]
    changes = [succeed(job, clock) for job in jobs]
    assert all(await engine.store.writes.apply(changes))
    after = (
        max(e.position or 0 for e in await engine.store.log.read_stream(f"job:{jobs[0].id}")) - 1
    )
    logged = [
        e for e in await engine.store.log.read_log(after, limit=1000) if e.type == "JobSucceeded"
    ]
    assert [e.stream for e in logged] == [c.stream for c in changes]


def test_json_array_refuses_what_json_would_not_carry_exactly() -> None:
    assert json_array(["a\x00b"]) is None  # NUL in text
    assert json_array([2**70]) is None  # past 64 bits
    assert json_array(["\ud800"]) is None  # a lone surrogate
    row = [AWKWARD, 2**63 - 1, -1, None, "2026-03-02T09:00:00.000Z"]
    text = json_array([row])
    assert text is not None
    with sqlite3.connect(":memory:") as conn:
        back = conn.execute(
            "SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'),"
            " json_extract(value, '$[2]'), json_extract(value, '$[3]'),"
            " json_extract(value, '$[4]') FROM json_each(?)",
            (text,),
        ).fetchall()
    conn.close()
    assert back == [tuple(row)]


async def test_a_pod_on_sqlite_takes_the_stores_group_commit_size(engine: Engine) -> None:
    assert SqliteStore.group_commit_changes > MAX_COMMIT_CHANGES
    runtime = Runtime(engine, pod_id="pod-a")
    assert runtime.committer._max_changes == SqliteStore.group_commit_changes


async def test_a_page_read_as_json_gives_back_every_value_exactly(engine: Engine) -> None:
    """`fast_pending` reads its page as one JSON array: text with quotes, control and
    non-BMP characters, JSON payloads and headers come back as stored."""
    payload = {"text": AWKWARD, "n": 2**63 - 1, "f": 0.1, "list": [1, None]}
    keys = [AWKWARD, "plain", "k2"]
    jobs = [await enqueue(engine, FAST, payload, key=key, headers={"h": AWKWARD}) for key in keys]
    store = engine.store
    found = {
        job.id: job
        for partition in {j.partition for j in jobs}
        for job in await store.queue.fast_pending(partition, after_key=None, limit=100)
    }
    for job in jobs:
        assert found[job.id] == job == await store.admin.get_job(job.id)
    for partition in {j.partition for j in jobs}:
        page = await store.queue.fast_pending(partition, after_key=None, limit=100)
        assert page == sorted(page, key=lambda j: (j.order_key, j.version, j.id))
