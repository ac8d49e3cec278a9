"""Lossy targets, in-process runner: one try after commit, drops counted and logged."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import pytest

from jobledger.config.settings import Settings
from jobledger.core import context
from jobledger.core.clock import FakeClock
from jobledger.domain.events import Actor
from jobledger.domain.jobs import Job
from jobledger.engine import Engine
from jobledger.observability.observe import Observer, RunRecord
from jobledger.storage.memory import MemoryStore
from jobledger.targets.lossy.install import install_lossy
from jobledger.targets.lossy.redis_stream import RedisLossyRunner
from jobledger.targets.lossy.runner import InProcessLossyRunner
from tests.stores import all_jobs


class Seen(Observer):
    def __init__(self) -> None:
        self.runs: list[RunRecord] = []
        self.drops: list[tuple[str, str]] = []

    def run_finished(self, record: RunRecord) -> None:
        self.runs.append(record)

    def lossy_dropped(self, target: str, reason: str) -> None:
        self.drops.append((target, reason))


@pytest.fixture
async def engine(clock: FakeClock) -> AsyncIterator[Engine]:
    store = MemoryStore(8)
    await store.open()
    yield Engine(store, clock=clock, settings=Settings(partitions=8))
    await store.close()


def recording(engine: Engine, *, fail: bool = False) -> list[tuple[Job, context.RequestContext]]:
    calls: list[tuple[Job, context.RequestContext]] = []

    async def handler(job: Job) -> None:
        calls.append((job, context.current()))
        if fail:
            raise RuntimeError("receiver said no")

    engine.targets.register("ping:lossy", "fast", handler, lossy=True)
    return calls


async def enqueue(engine: Engine, payload: object = None, *, rollback: bool = False) -> None:
    with context.request_context(trace_id="ab" * 16, actor=Actor(id="u1", via="http")):
        try:
            async with engine.transaction() as tx:
                result = await engine.enqueue("ping:lossy", payload, tx=tx, key="k1")
                assert result.lossy and not result.inserted
                if rollback:
                    raise LookupError("business rollback")
        except LookupError:
            pass


async def test_commit_delivers_once_in_the_job_context(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO")
    calls = recording(engine)
    seen = Seen()
    engine.observers.add(seen)
    runner = install_lossy(engine)
    assert isinstance(runner, InProcessLossyRunner)
    await runner.start()
    await enqueue(engine, {"n": 1})
    await runner.join()
    await runner.stop()
    assert len(calls) == 1
    job, ctx = calls[0]
    assert (job.target, job.code, job.key, job.payload) == (
        "ping:lossy",
        "ping:lossy",
        "k1",
        {"n": 1},
    )
    assert job.trace_id == "ab" * 16 and ctx.trace_id == "ab" * 16
    assert ctx.actor == Actor(id="u1", via="system")
    assert runner.delivered == 1 and not runner.dropped
    assert [r.result for r in seen.runs] == ["ok"]
    assert seen.runs[0].attempts == 1 and seen.runs[0].started_at == engine.clock.now()
    assert await all_jobs(engine.store) == []  # lossy items are never stored
    assert "job run code=ping:lossy target=ping:lossy" in caplog.text and "result=ok" in caplog.text


async def test_rollback_hands_nothing_over(engine: Engine) -> None:
    calls = recording(engine)
    runner = install_lossy(engine)
    assert isinstance(runner, InProcessLossyRunner)
    await runner.start()
    await enqueue(engine, rollback=True)
    await runner.join()
    await runner.stop()
    assert calls == [] and runner.handed_over == 0 and not runner.dropped


async def test_handler_failure_is_dropped_counted_and_logged(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    calls = recording(engine, fail=True)
    seen = Seen()
    engine.observers.add(seen)
    runner = install_lossy(engine)
    assert isinstance(runner, InProcessLossyRunner)
    await runner.start()
    await enqueue(engine)
    await runner.join()
    await runner.stop()
    assert len(calls) == 1  # one try, never retried
    assert runner.dropped == {"handler_failed": 1} and runner.delivered == 0
    assert seen.drops == [("ping:lossy", "handler_failed")]
    assert [r.result for r in seen.runs] == ["dropped"]
    assert "receiver said no" in (seen.runs[0].error or "")
    assert any(
        "lossy job dropped target=ping:lossy reason=handler_failed" in r.getMessage()
        for r in caplog.records
    )


async def test_full_queue_drops_and_counts(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    calls = recording(engine)
    runner = InProcessLossyRunner(engine, maxsize=2)
    engine.lossy_handoff = runner.hand_off
    for n in range(3):  # the consumer is not started yet: the queue fills up
        await enqueue(engine, n)
    assert runner.dropped == {"queue_full": 1}
    assert "reason=queue_full" in caplog.text
    await runner.start()
    await runner.join()
    await runner.stop()
    assert [job.payload for job, _ in calls] == [0, 1]


async def test_workers_off_runs_no_consumer_and_drops_at_hand_off(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    calls = recording(engine)
    runner = install_lossy(engine, dataclasses.replace(engine.settings, workers=False))
    await runner.start()
    assert isinstance(runner, InProcessLossyRunner) and runner._tasks == []
    await enqueue(engine)
    await asyncio.sleep(0)
    await runner.stop()
    assert calls == [] and runner.dropped == {"workers_off": 1}
    assert "reason=workers_off" in caplog.text


async def test_stop_drops_what_is_still_queued(engine: Engine) -> None:
    recording(engine)
    runner = InProcessLossyRunner(engine, maxsize=5)
    engine.lossy_handoff = runner.hand_off
    await enqueue(engine)
    await runner.stop()
    assert runner.dropped == {"shutdown": 1}


async def test_stop_counts_a_run_cut_short(engine: Engine) -> None:
    started = asyncio.Event()

    async def slow(job: Job) -> None:
        started.set()
        await asyncio.Event().wait()

    engine.targets.register("ping:lossy", "fast", slow, lossy=True)
    runner = install_lossy(engine)
    await runner.start()
    await enqueue(engine)
    await started.wait()
    await runner.stop()
    assert runner.dropped == {"shutdown": 1}


async def test_install_picks_redis_when_a_url_is_set(engine: Engine) -> None:
    settings = dataclasses.replace(engine.settings, lossy_redis_url="redis://127.0.0.1:6379/0")
    runner = install_lossy(engine, settings)
    assert isinstance(runner, RedisLossyRunner)
    assert engine.lossy_handoff == runner.hand_off
    await runner.redis.aclose()
