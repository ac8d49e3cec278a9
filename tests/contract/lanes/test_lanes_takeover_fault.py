"""A takeover that meets a dropped connection must not orphan the partitions it took.

The chaos run's "not drained" failures (docs/reliability.md, Findings 6): partitions of a
killed pod were taken by a live pod whose takeover read failed; the pod kept renewing
their leases, so no other pod could take them, and it never started their workers.
Every held partition must have a running worker once the store answers again."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from jobledger.core.clock import FakeClock
from jobledger.domain.jobs import DeliveryMode
from jobledger.engine import Engine
from jobledger.reactors.runtime import Runtime
from jobledger.storage.port import Store
from tests.contract.lanes_kit import Recorder, enqueue, keys_in, make_engine, settle


class FailsOnce:
    """Fault injection on a real store: the next call fails the way a terminated
    connection does, before anything is read or written."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.armed = False
        self.failed = 0

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.armed:
            self.armed = False
            self.failed += 1
            raise ConnectionResetError("server closed the connection unexpectedly")
        return await self.real(*args, **kwargs)


async def _run_until(clock: FakeClock, done: Any, *, fake_s: float, each: Any = None) -> bool:
    """Move the fake clock a second at a time (heartbeats run on it) until `done()`,
    awaiting `each()` (another pod's heartbeat) every second."""
    for _ in range(int(fake_s)):
        if done():
            return True
        clock.advance(seconds=1)
        if each is not None:
            await each()
        await settle()
    return bool(done())


@asynccontextmanager
async def running(engine: Engine) -> AsyncIterator[Runtime]:
    runtime = Runtime(engine, pod_id="pod-a")
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.stop()


def _engine(store: Store, clock: FakeClock) -> tuple[Engine, Recorder]:
    """An engine with one at-least-once fast target, `kafka:t`, whose calls are recorded."""
    engine = make_engine(store, clock)
    rec = Recorder()
    engine.targets.register("kafka:t", "fast", rec, delivery_mode=DeliveryMode.AT_LEAST_ONCE)
    return engine, rec


def _state(runtime: Runtime, rec: Recorder) -> str:
    served = {job.partition for job in rec.calls}
    owned = set(runtime.leases.owned)
    return (
        f"{len(rec.calls)} delivered; pod-a holds {len(owned)} partitions, runs "
        f"{len(runtime.fast.workers)} workers, served {len(served & owned)} of them"
    )


def assert_every_held_partition_has_a_worker(runtime: Runtime) -> None:
    assert set(runtime.fast.workers) == set(runtime.leases.owned), _state(runtime, Recorder())


def one_job_per_partition(store: Store) -> list[dict[str, Any]]:
    return [
        {"key": keys_in(p, 1, partitions=store.partitions)[0], "payload": p}
        for p in range(store.partitions)
    ]


async def _ghost_holds_everything(store: Store, clock: FakeClock) -> None:
    """A pod that took every partition and was killed: no liveness row, leases for 30 s."""
    await store.coordination.seed_partitions(store.partitions)
    now = clock.now()
    taken = await store.coordination.take_partitions(
        list(range(store.partitions)), "ghost", now, now + timedelta(seconds=30)
    )
    assert len(taken) == store.partitions


async def test_a_takeover_whose_read_fails_still_serves_the_partitions(
    store: Store, clock: FakeClock, monkeypatch: Any
) -> None:
    engine, rec = _engine(store, clock)
    await _ghost_holds_everything(store, clock)
    async with running(engine) as runtime:
        assert runtime.leases.owned == {}  # the ghost's leases are still valid
        await enqueue(engine, "kafka:t", one_job_per_partition(store))
        fault = FailsOnce(store.queue.inflight_in)
        monkeypatch.setattr(store.queue, "inflight_in", fault)
        fault.armed = True
        # the ghost's leases expire; pod-a takes them and its takeover read fails once
        assert await _run_until(clock, lambda: fault.failed == 1, fake_s=60)
        assert await _run_until(clock, lambda: len(rec.calls) == store.partitions, fake_s=60), (
            _state(runtime, rec)
        )
        assert_every_held_partition_has_a_worker(runtime)


async def test_a_take_that_fails_half_way_announces_what_it_took(
    store: Store, clock: FakeClock, monkeypatch: Any
) -> None:
    """The share is taken in slices (a racing pod may win part of a slice); a slice that
    fails after an earlier one committed must not leave the earlier partitions held and
    unserved. Every job of pod-a's partitions is delivered (pod-b is a bystander that
    holds nothing, so only pod-a's half of the jobs can run)."""
    engine, rec = _engine(store, clock)
    await store.coordination.seed_partitions(store.partitions)
    lease = timedelta(seconds=30)

    async def pod_b_beats() -> None:  # live throughout, holding nothing
        await store.coordination.beat("pod-b", clock.now(), [], clock.now() + lease, clock.now())

    await pod_b_beats()
    await store.coordination.beat(
        "pod-c", clock.now(), [], clock.now() + lease, clock.now()
    )  # then dies
    real_take = store.coordination.take_partitions
    armed, calls = False, 0

    async def second_slice_fails(partitions: Sequence[int], *args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        if not armed or (calls == 0 and len(partitions) < 5):  # the share's flapping by one
            return await real_take(partitions, *args, **kwargs)
        calls += 1
        if calls == 1:  # a racing pod won half of the slice: pod-a gets the other half
            return await real_take(list(partitions)[: len(partitions) // 2], *args, **kwargs)
        if calls == 2:  # the next slice meets a dropped connection
            raise ConnectionResetError("server closed the connection unexpectedly")
        return await real_take(partitions, *args, **kwargs)

    monkeypatch.setattr(store.coordination, "take_partitions", second_slice_fails)
    async with running(engine) as runtime:
        share = len(runtime.leases.owned)
        assert share == -(-store.partitions // 3)  # three live pods
        await enqueue(engine, "kafka:t", one_job_per_partition(store))
        armed = True
        # pod-c's liveness lapses: pod-a's share grows to half, taken in two slices
        assert await _run_until(clock, lambda: calls >= 2, fake_s=60, each=pod_b_beats)

        def served() -> set[int]:
            return {job.partition for job in rec.calls}

        def half_held_and_served() -> bool:
            owned = set(runtime.leases.owned)
            return len(owned) == store.partitions // 2 and served() >= owned

        assert await _run_until(clock, half_held_and_served, fake_s=90, each=pod_b_beats), _state(
            runtime, rec
        )
        assert_every_held_partition_has_a_worker(runtime)


async def test_a_take_whose_answer_was_lost_is_adopted_at_the_next_beat(
    store: Store, clock: FakeClock, monkeypatch: Any
) -> None:
    """The take committed and the connection dropped before its answer: the pod holds
    leases it does not know about. It adopts them at its next heartbeat instead of
    leaving them unserved until they expire (30 s)."""
    engine, rec = _engine(store, clock)
    await _ghost_holds_everything(store, clock)
    real_take = store.coordination.take_partitions
    lost_answers = 0

    async def answer_lost(partitions: Sequence[int], *args: Any, **kwargs: Any) -> Any:
        nonlocal lost_answers
        taken = await real_take(partitions, *args, **kwargs)
        if taken and not lost_answers:
            lost_answers += 1
            raise ConnectionResetError("server closed the connection unexpectedly")
        return taken

    monkeypatch.setattr(store.coordination, "take_partitions", answer_lost)
    async with running(engine) as runtime:
        await enqueue(engine, "kafka:t", one_job_per_partition(store))
        assert await _run_until(clock, lambda: lost_answers == 1, fake_s=60)
        taken_at = clock.now()
        assert await _run_until(clock, lambda: len(rec.calls) == store.partitions, fake_s=60)
        assert clock.now() - taken_at < timedelta(seconds=25), "served only once they expired"
        assert_every_held_partition_has_a_worker(runtime)


async def test_a_worker_whose_task_ended_is_started_again_at_the_next_beat(
    store: Store, clock: FakeClock
) -> None:
    """A worker task that ended without being stopped (it raised out of its loop) leaves
    its partition held and unserved; the next renewal starts a new worker."""
    engine, rec = _engine(store, clock)
    async with running(engine) as runtime:
        victim = runtime.fast.workers[3]
        assert victim.task is not None
        victim.task.cancel()  # ends it the way an error escaping `run` would
        await _run_until(clock, lambda: victim.task is not None and victim.task.done(), fake_s=1)
        await enqueue(engine, "kafka:t", one_job_per_partition(store))
        assert await _run_until(clock, lambda: len(rec.calls) == store.partitions, fake_s=30), (
            _state(runtime, rec)
        )
        assert runtime.fast.workers[3] is not victim


async def test_a_first_beat_that_fails_does_not_fail_the_start(
    store: Store, clock: FakeClock, monkeypatch: Any
) -> None:
    """A replacement pod whose first heartbeat meets a terminated backend starts anyway
    and takes its share at the next beat (docs/reliability.md, Findings 2)."""
    engine, rec = _engine(store, clock)
    fault = FailsOnce(store.coordination.beat)
    fault.armed = True
    monkeypatch.setattr(store.coordination, "beat", fault)
    async with running(engine) as runtime:
        assert fault.failed == 1 and runtime.leases.owned == {}
        await enqueue(engine, "kafka:t", one_job_per_partition(store))
        assert await _run_until(clock, lambda: len(rec.calls) == store.partitions, fake_s=30)
        assert len(runtime.leases.owned) == store.partitions
