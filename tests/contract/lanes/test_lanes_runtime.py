"""The runtime on every adapter: feed wake-ups with a frozen clock, retry timers,
observers, a clean stop, and JOBS_WORKERS=off."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import datetime, timedelta

from jobledger.core.clock import FakeClock
from jobledger.domain.errors import DeadNow, TargetUnreachable
from jobledger.domain.jobs import DeliveryMode, Job
from jobledger.observability.observe import Observer, RunRecord
from jobledger.reactors.runtime import Runtime
from jobledger.storage.port import Store
from tests.contract.lanes_kit import Recorder, enqueue, make_engine, until
from tests.stores import all_jobs


class Seen(Observer):
    def __init__(self) -> None:
        self.runs: list[RunRecord] = []
        self.dead: list[tuple[str, str]] = []
        self.paused: list[str] = []
        self.resumed: list[str] = []
        self.owned: list[tuple[str, int]] = []

    def run_finished(self, record: RunRecord) -> None:
        self.runs.append(record)

    def job_dead(self, job: Job, reason: str, error: str | None) -> None:
        self.dead.append((job.id, reason))

    def target_paused(self, target: str, since: datetime) -> None:
        self.paused.append(target)

    def target_resumed(self, target: str, paused_s: float) -> None:
        self.resumed.append(target)

    def partitions_owned(self, pod: str, count: int) -> None:
        self.owned.append((pod, count))


async def test_feed_wakes_both_lanes_without_moving_the_clock(
    store: Store, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    fast, slow = Recorder(), Recorder()
    engine.targets.register("kafka:t", "fast", fast, delivery_mode=DeliveryMode.AT_LEAST_ONCE)
    engine.targets.register("kafka:m", "fast", fast)
    engine.targets.register("report", "long", slow)
    seen = Seen()
    engine.observers.add(seen)
    runtime = Runtime(engine, pod_id="pod-a")
    await runtime.start()
    try:
        await until(lambda: all(not w.busy for w in runtime.fast.workers.values()))
        await enqueue(engine, "kafka:t", [{"key": f"k{i}", "payload": i} for i in range(200)])
        await enqueue(engine, "kafka:m", [{"key": f"k{i}", "payload": i} for i in range(50)])
        await enqueue(engine, "report", [{"payload": "r"}])
        await until(lambda: len(fast.calls) == 250 and len(slow.calls) == 1)
        await until(lambda: len(seen.runs) == 251)
        assert await _open_jobs(store) == 0
        assert Counter(r.result for r in seen.runs) == {"ok": 251}
        assert ("pod-a", 64) in seen.owned
    finally:
        await runtime.stop()
    assert all(lease.owner is None for lease in await store.coordination.leases())
    assert "pod-a" not in await store.coordination.live_workers(clock.now() - timedelta(seconds=60))


async def _open_jobs(store: Store) -> int:
    return len(await all_jobs(store))


async def test_retry_is_a_timer_not_a_poll(store: Store, clock: FakeClock) -> None:
    engine = make_engine(store, clock, safety_poll_s=3600.0)
    rec = Recorder()
    rec.raises = [RuntimeError("no")]
    engine.targets.register("kafka:t", "fast", rec)
    runtime = Runtime(engine, pod_id="pod-a")
    await runtime.start()
    try:
        (job_id,) = await enqueue(engine, "kafka:t", [{"key": "a"}])
        await until(lambda: len(rec.calls) == 1)
        await until(lambda: _attempts(store, job_id, 1))
        clock.advance(seconds=59)
        await asyncio.sleep(0.05)
        assert len(rec.calls) == 1
        clock.advance(seconds=1)
        await until(lambda: len(rec.calls) == 2)
        await until(lambda: _gone(store, job_id))
    finally:
        await runtime.stop()


async def test_a_handed_over_row_waits_for_the_earlier_version_of_its_key(
    store: Store, clock: FakeClock
) -> None:
    """A single enqueue wakes an idle pod with its row (PostgreSQL hands it over: the
    lane marks it without a read, `Writes.mark_first`); a row whose key still has an
    earlier version waiting for its retry is not sent before it."""
    engine = make_engine(store, clock, safety_poll_s=3600.0)
    rec = Recorder()
    rec.raises = [RuntimeError("no")]
    engine.targets.register("kafka:m", "fast", rec)
    runtime = Runtime(engine, pod_id="pod-a")
    await runtime.start()
    try:
        (first,) = await enqueue(engine, "kafka:m", [{"key": "a", "version": 1, "payload": 1}])
        await until(lambda: _attempts(store, first, 1))
        await until(lambda: all(w.idle for w in runtime.fast.workers.values()))
        await enqueue(engine, "kafka:m", [{"key": "a", "version": 2, "payload": 2}])
        await asyncio.sleep(0.1)
        assert rec.payloads == [1]
        clock.advance(seconds=60)
        await until(lambda: len(rec.calls) == 3)
        assert rec.payloads == [1, 1, 2]
    finally:
        await runtime.stop()


async def _attempts(store: Store, job_id: str, attempts: int) -> bool:
    row = await store.admin.get_job(job_id)
    return row is not None and row.attempts == attempts


async def _gone(store: Store, job_id: str) -> bool:
    return await store.admin.get_job(job_id) is None


async def test_observers_see_pause_resume_and_dead(store: Store, clock: FakeClock) -> None:
    # the clock jumps a whole probe interval at once: with the default 30 s partition lease
    # that is a stalled pod, whose lease guard rightly refuses the probe's in-flight mark
    engine = make_engine(store, clock, partition_lease_s=3600.0, worker_live_s=3600.0)
    rec = Recorder()
    rec.raises = [TargetUnreachable("down"), None, DeadNow("bad record")]
    engine.targets.register("kafka:t", "fast", rec)
    seen = Seen()
    engine.observers.add(seen)
    runtime = Runtime(engine, pod_id="pod-a")
    await runtime.start()
    try:
        ids = await enqueue(
            engine, "kafka:t", [{"key": "a", "version": 1}, {"key": "a", "version": 2}]
        )
        await until(lambda: seen.paused == ["kafka:t"])
        clock.advance(seconds=30)
        await until(lambda: len(seen.dead) == 1)
        assert seen.resumed == ["kafka:t"]
        assert seen.dead == [(ids[1], "dead_now")]
        assert [r.result for r in seen.runs] == ["deferred", "ok", "dead"]
    finally:
        await runtime.stop()


async def test_stop_finishes_the_run_in_flight(store: Store, clock: FakeClock) -> None:
    engine = make_engine(store, clock)
    rec = Recorder()
    rec.gate = asyncio.Event()
    engine.targets.register("kafka:t", "fast", rec)
    runtime = Runtime(engine, pod_id="pod-a")
    await runtime.start()
    (job_id,) = await enqueue(engine, "kafka:t", [{"key": "a"}])
    await asyncio.wait_for(rec.entered.wait(), 10)
    stopping = asyncio.create_task(runtime.stop())
    await asyncio.sleep(0.02)
    assert not stopping.done()
    rec.gate.set()
    await asyncio.wait_for(stopping, 10)
    assert await store.admin.get_job(job_id) is None
    assert all(lease.owner is None for lease in await store.coordination.leases())


async def test_workers_off_pod_only_enqueues(store: Store, clock: FakeClock) -> None:
    engine = make_engine(store, clock, workers=False)
    rec = Recorder()
    engine.targets.register("kafka:t", "fast", rec)
    started: list[str] = []

    class Ticker:
        async def start(self) -> None:
            started.append("start")

        async def stop(self) -> None:
            started.append("stop")

    runtime = Runtime(engine, pod_id="pod-off", reactors=[Ticker()])
    await runtime.start()
    (job_id,) = await enqueue(engine, "kafka:t", [{"key": "a"}])
    await asyncio.sleep(0.05)
    clock.advance(minutes=5)
    await asyncio.sleep(0.05)
    await runtime.stop()
    assert rec.calls == [] and started == []
    assert await store.admin.get_job(job_id) is not None
    assert all(lease.owner is None for lease in await store.coordination.leases())
    assert await store.coordination.live_workers(clock.now() - timedelta(days=1)) == []
