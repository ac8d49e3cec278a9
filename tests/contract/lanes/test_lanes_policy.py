"""A target's own retry delays and timeout, on both lanes, over every adapter, under the
fake clock: the delays it asked for, DEAD when they run out, a run past its timeout
recorded as timed out and retried (at-least-once) or DEAD (at-most-once), for an
`async def` handler and for a plain `def` one running in a thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from jobledger.core.clock import FakeClock
from jobledger.domain.events import EventType
from jobledger.domain.jobs import DeliveryMode, Job, JobStatus
from jobledger.engine import Engine
from jobledger.reactors.runtime import Runtime
from jobledger.storage.port import Store
from tests.contract.lanes_kit import drain, enqueue, keys_in, make_engine, pod, until

ALO = DeliveryMode.AT_LEAST_ONCE
AMO = DeliveryMode.AT_MOST_ONCE
P = 5
KEY = keys_in(P, 1)[0]
FAST_TIMEOUT_S = 5.0  # under the 7.5 s a send may start with (30 s partition lease)
LONG_TIMEOUT_S = 120.0  # under the 300 s long-lane claim lease


class Lane:
    """One lane of one pod, driven by hand: `run_due()` runs what is due now."""

    def __init__(self, name: str, engine: Engine, runtime: Runtime) -> None:
        self.name, self.engine, self.runtime = name, engine, runtime

    async def run_due(self) -> None:
        if self.name == "fast":
            await drain(self.runtime, P)
        else:
            rows = await self.runtime.long.reserve()
            if rows:
                await self.runtime.long.run_batch(rows)

    async def enqueue_one(self) -> str:
        item: dict[str, Any] = {"payload": {"n": 1}}
        if self.name == "fast":
            item["key"] = KEY
        (job_id,) = await enqueue(self.engine, "t", [item])
        return job_id


async def a_lane(
    lane: str,
    store: Store,
    clock: FakeClock,
    handler: Callable[[Job], Any],
    mode: DeliveryMode = ALO,
    **policy: Any,
) -> Lane:
    engine = make_engine(store, clock)
    engine.targets.register("t", lane, handler, delivery_mode=mode, **policy)
    runtime = pod(engine, "pod-a")
    if lane == "fast":
        await runtime.leases.start()
    return Lane(lane, engine, runtime)


async def _row(store: Store, job_id: str) -> Job:
    row = await store.admin.get_job(job_id)
    assert row is not None
    return row


async def _types(store: Store, job_id: str) -> list[EventType]:
    return [e.type for e in await store.log.read_stream(f"job:{job_id}")]


@pytest.mark.parametrize("lane", ["fast", "long"])
async def test_retry_5_10_runs_three_times_at_those_delays_then_dead(
    lane: str, store: Store, clock: FakeClock
) -> None:
    runs: list[object] = []

    async def rejects(job: Job) -> None:
        runs.append(clock.now())
        raise RuntimeError("rejected")

    it = await a_lane(lane, store, clock, rejects, retry=[5, timedelta(seconds=10)])
    job_id = await it.enqueue_one()
    start = clock.now()
    await it.run_due()
    row = await _row(store, job_id)
    assert (row.status, row.attempts) == (JobStatus.PENDING, 1)
    assert row.next_run_at == start + timedelta(seconds=5)
    clock.advance(seconds=4.999)
    await it.run_due()  # not due yet
    assert len(runs) == 1
    clock.advance(milliseconds=1)
    await it.run_due()
    row = await _row(store, job_id)
    assert (row.status, row.attempts) == (JobStatus.PENDING, 2)
    assert row.next_run_at == clock.now() + timedelta(seconds=10)
    clock.advance(seconds=10)
    await it.run_due()
    row = await _row(store, job_id)
    assert (row.status, row.attempts, row.dead_reason) == (JobStatus.DEAD, 3, "max_attempts")
    assert runs == [start, start + timedelta(seconds=5), start + timedelta(seconds=15)]
    clock.advance(minutes=30)
    await it.run_due()
    assert len(runs) == 3


@pytest.mark.parametrize("lane", ["fast", "long"])
async def test_a_per_code_max_still_wins_over_the_list(
    lane: str, store: Store, clock: FakeClock
) -> None:
    async def rejects(job: Job) -> None:
        raise RuntimeError("rejected")

    it = await a_lane(lane, store, clock, rejects, retry=[5, 10])
    it.engine.targets.set_max_attempts("t", 2)
    job_id = await it.enqueue_one()
    await it.run_due()
    clock.advance(seconds=5)
    await it.run_due()
    row = await _row(store, job_id)
    assert (row.status, row.attempts) == (JobStatus.DEAD, 2)


async def _times_out(it: Lane, clock: FakeClock, entered: Callable[[], bool]) -> None:
    """Run what is due while the clock moves past the target's timeout."""
    running = asyncio.ensure_future(it.run_due())
    await until(entered)
    timeout_s = it.engine.targets.get("t").timeout_s
    assert timeout_s is not None
    clock.advance(seconds=timeout_s - 0.001)
    await asyncio.sleep(0.01)
    assert not running.done()  # not yet
    clock.advance(milliseconds=1)
    await asyncio.wait_for(running, 10)


def _timeout_for(lane: str) -> float:
    return FAST_TIMEOUT_S if lane == "fast" else LONG_TIMEOUT_S


@pytest.mark.parametrize("lane", ["fast", "long"])
async def test_an_async_run_past_its_timeout_fails_and_is_retried(
    lane: str, store: Store, clock: FakeClock
) -> None:
    calls: list[int] = []
    cancelled = asyncio.Event()

    async def hangs_once(job: Job) -> None:
        calls.append(1)
        if len(calls) == 1:
            try:
                await asyncio.Event().wait()  # longer than any timeout
            except asyncio.CancelledError:
                cancelled.set()
                raise

    it = await a_lane(lane, store, clock, hangs_once, retry=[30], timeout_s=_timeout_for(lane))
    job_id = await it.enqueue_one()
    await _times_out(it, clock, lambda: bool(calls))
    assert cancelled.is_set()
    row = await _row(store, job_id)
    assert (row.status, row.attempts) == (JobStatus.PENDING, 1)
    assert row.last_error is not None and row.last_error.startswith("timeout: ")
    assert row.next_run_at == clock.now() + timedelta(seconds=30)
    (failed,) = [
        e for e in await store.log.read_stream(f"job:{job_id}") if e.type == EventType.JOB_FAILED
    ]
    assert failed.data.get("reason", "timeout") == "timeout"  # the failure details name it
    clock.advance(seconds=30)
    await it.run_due()
    assert len(calls) == 2
    assert await store.admin.get_job(job_id) is None  # the retry succeeded
    assert EventType.JOB_SUCCEEDED in await _types(store, job_id)


@pytest.mark.parametrize("lane", ["fast", "long"])
async def test_a_thread_run_past_its_timeout_fails_and_is_retried_while_it_runs_on(
    lane: str, store: Store, clock: FakeClock
) -> None:
    release, finished = threading.Event(), threading.Event()
    calls: list[int] = []

    def blocks_once(job: Job) -> None:
        calls.append(1)
        if len(calls) == 1:
            release.wait(30)
            finished.set()

    it = await a_lane(lane, store, clock, blocks_once, retry=[30], timeout_s=_timeout_for(lane))
    job_id = await it.enqueue_one()
    try:
        await _times_out(it, clock, lambda: bool(calls))
        row = await _row(store, job_id)
        assert (row.status, row.attempts) == (JobStatus.PENDING, 1)
        assert row.last_error is not None and row.last_error.startswith("timeout: ")
        assert not finished.is_set()  # the thread was not stopped: it runs on
        clock.advance(seconds=30)
        await it.run_due()  # the retry runs while the first thread still does
        assert len(calls) == 2 and not finished.is_set()
        assert await store.admin.get_job(job_id) is None
    finally:
        release.set()
    assert await asyncio.to_thread(finished.wait, 10)


@pytest.mark.parametrize("lane", ["fast", "long"])
async def test_an_at_most_once_run_past_its_timeout_goes_dead(
    lane: str, store: Store, clock: FakeClock
) -> None:
    """The cancelled run may have had its effect; sending it again could deliver twice."""
    calls: list[int] = []

    async def hangs(job: Job) -> None:
        calls.append(1)
        await asyncio.Event().wait()

    it = await a_lane(lane, store, clock, hangs, AMO, retry=[30], timeout_s=_timeout_for(lane))
    job_id = await it.enqueue_one()
    await _times_out(it, clock, lambda: bool(calls))
    row = await _row(store, job_id)
    assert (row.status, row.attempts, row.dead_reason) == (JobStatus.DEAD, 1, "timeout")
    assert row.last_error is not None and row.last_error.startswith("timeout: ")
    clock.advance(minutes=5)
    await it.run_due()
    assert len(calls) == 1
