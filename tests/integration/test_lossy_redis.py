"""Lossy targets through a Redis stream, against the real Redis server on loopback.

Every test uses its own stream and group names and deletes the stream afterwards.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import uuid
from collections.abc import AsyncIterator, Callable

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from jobledger.config.settings import Settings
from jobledger.core import context
from jobledger.core.clock import FakeClock
from jobledger.domain.events import Actor
from jobledger.domain.jobs import Job
from jobledger.engine import Engine
from jobledger.storage.memory import MemoryStore
from jobledger.targets.lossy.install import install_lossy
from jobledger.targets.lossy.redis_stream import RedisLossyRunner

REDIS_URL = os.environ.get("JOBLEDGER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
TARGET = "audit:lossy"
Calls = list[tuple[Job, context.RequestContext]]


@pytest.fixture
async def redis_client() -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        await client.ping()
    except RedisConnectionError:
        await client.aclose()
        pytest.skip(f"no Redis server at {REDIS_URL}")
    yield client
    await client.aclose()


@pytest.fixture
async def stream(redis_client: aioredis.Redis) -> AsyncIterator[str]:
    name = f"jobledger-test:lossy:{uuid.uuid4().hex}"
    yield name
    await redis_client.delete(name)


PodFactory = Callable[..., tuple[Engine, RedisLossyRunner, Calls]]


@pytest.fixture
async def pods(stream: str, clock: FakeClock) -> AsyncIterator[PodFactory]:
    """Make 'pods': an engine with the lossy target registered and a Redis runner."""
    made: list[tuple[MemoryStore, RedisLossyRunner]] = []

    def make(
        *, workers: bool = True, fail: bool = False, url: str = REDIS_URL
    ) -> tuple[Engine, RedisLossyRunner, Calls]:
        store = MemoryStore(8)
        settings = Settings(partitions=8, lossy_redis_url=url, workers=workers)
        engine = Engine(store, clock=clock, settings=settings)
        calls: Calls = []

        async def handler(job: Job) -> None:
            calls.append((job, context.current()))
            if fail:
                raise RuntimeError("downstream refused")

        engine.targets.register(TARGET, "fast", handler, lossy=True)
        runner = install_lossy(engine)
        assert isinstance(runner, RedisLossyRunner)
        runner.stream, runner.group, runner.block_ms = stream, f"{stream}:group", 50
        made.append((store, runner))
        return engine, runner, calls

    yield make
    for store, runner in made:
        await runner.stop()
        await store.close()


async def enqueue(engine: Engine, payload: object = None, *, rollback: bool = False) -> None:
    with context.request_context(trace_id="cd" * 16, actor=Actor(id="u9", via="http")):
        try:
            async with engine.transaction() as tx:
                await engine.enqueue(TARGET, payload, tx=tx, key="order-1", dedupe_key="d-1")
                if rollback:
                    raise LookupError("rollback")
        except LookupError:
            pass


async def drain(runner: RedisLossyRunner, expected: int) -> None:
    """Read until `expected` entries were tried (each read blocks ≤ 50 ms on Redis)."""
    seen = 0
    for _ in range(100):
        if seen >= expected:
            return
        seen += await runner.read_once()
    raise AssertionError(f"read {seen} of {expected} entries")


async def test_commit_is_delivered_once_and_removed(
    pods: PodFactory, redis_client: aioredis.Redis, stream: str
) -> None:
    engine, runner, calls = pods()
    await runner.start()  # creates the group, starts the background consumer
    await enqueue(engine, {"v": 1})
    await runner.flush()
    for _ in range(200):
        if runner.delivered:
            break
        await asyncio.sleep(0.01)
    assert len(calls) == 1
    job, ctx = calls[0]
    assert (job.target, job.key, job.dedupe_key, job.payload) == (
        TARGET,
        "order-1",
        "d-1",
        {"v": 1},
    )
    assert job.trace_id == "cd" * 16 and ctx.trace_id == "cd" * 16
    assert ctx.actor == Actor(id="u9", via="system")
    await runner.stop()
    assert await redis_client.xlen(stream) == 0  # XDEL after the try
    pending = await redis_client.xpending(stream, f"{stream}:group")
    assert pending["pending"] == 0  # XACK after the try
    assert runner.delivered == 1 and not runner.dropped


async def test_rollback_publishes_nothing(
    pods: PodFactory, redis_client: aioredis.Redis, stream: str
) -> None:
    engine, runner, calls = pods()
    await enqueue(engine, rollback=True)
    await runner.flush()
    assert await redis_client.exists(stream) == 0
    assert runner.handed_over == 0 and calls == []


async def test_handler_failure_is_dropped_counted_and_deleted(
    pods: PodFactory, redis_client: aioredis.Redis, stream: str
) -> None:
    engine, runner, calls = pods(fail=True)
    await runner._ensure_group()
    await enqueue(engine)
    await runner.flush()
    await drain(runner, 1)
    assert len(calls) == 1
    assert runner.dropped == {"handler_failed": 1}
    assert await runner.read_once(block_ms=10) == 0  # never offered again
    assert await redis_client.xlen(stream) == 0


async def test_workers_off_pod_publishes_and_another_pod_consumes(
    pods: PodFactory, redis_client: aioredis.Redis, stream: str
) -> None:
    api_engine, api_runner, api_calls = pods(workers=False)
    _, worker_runner, worker_calls = pods()
    await api_runner.start()
    assert api_runner._task is None  # JOBS_WORKERS=off: no consumer on this pod
    await worker_runner._ensure_group()
    await enqueue(api_engine, "from the api pod")
    await api_runner.flush()
    assert await redis_client.xlen(stream) == 1 and api_runner.handed_over == 1
    await drain(worker_runner, 1)
    assert api_calls == []
    assert [job.payload for job, _ in worker_calls] == ["from the api pod"]
    assert not api_runner.dropped


async def test_entries_of_a_dead_consumer_are_reaped_not_rerun(
    pods: PodFactory, redis_client: aioredis.Redis, stream: str
) -> None:
    engine, runner, calls = pods()
    await runner._ensure_group()
    await enqueue(engine)
    await runner.flush()
    # another pod reads the entry and dies before acknowledging it
    await redis_client.xreadgroup(f"{stream}:group", "dead-pod", {stream: ">"}, count=10)
    assert await runner.reap(idle_s=0) == 1
    assert calls == [] and runner.dropped == {"consumer_lost": 1}
    assert await redis_client.xlen(stream) == 0


async def test_publish_failure_is_dropped_and_counted(pods: PodFactory) -> None:
    engine, runner, calls = pods(url="redis://127.0.0.1:1/0")  # nothing listens there
    await enqueue(engine)
    await runner.flush()
    assert runner.dropped == {"publish_failed": 1} and runner.handed_over == 0
    assert calls == []


async def test_bad_and_unknown_messages_are_dropped(
    pods: PodFactory, redis_client: aioredis.Redis, stream: str
) -> None:
    _, runner, calls = pods()
    await runner._ensure_group()
    await redis_client.xadd(stream, {"job": "not json"})
    await redis_client.xadd(
        stream,
        {"job": '{"v": 1, "id": "x", "at": "2026-01-01T00:00:00.000Z", "target": "gone:target"}'},
    )
    await drain(runner, 2)
    assert runner.dropped == {"bad_message": 1, "unknown_target": 1}
    assert calls == [] and await redis_client.xlen(stream) == 0


def test_settings_without_url_are_rejected() -> None:
    engine = Engine(MemoryStore(8), settings=dataclasses.replace(Settings(), lossy_redis_url=None))
    with pytest.raises(ValueError, match="Redis URL"):
        RedisLossyRunner(engine)
