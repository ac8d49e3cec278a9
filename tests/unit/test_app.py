"""jobledger.App: declarations, handlers (async, plain def, typed), run_until_idle."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest

from jobledger import App
from jobledger.core.clock import FakeClock
from jobledger.domain.errors import ConfigError, InvalidArgument
from jobledger.domain.jobs import Job


@dataclass
class Order:
    no: str
    cents: int


async def test_a_plain_def_handler_runs_once_in_a_thread() -> None:
    app = App(store="memory://", clock=FakeClock())
    threads: list[int] = []

    @app.target("mail:x", lane="fast")
    def send(job: Job) -> None:
        threads.append(threading.get_ident())

    await app.start(workers=False)
    async with app.transaction() as tx:
        await app.enqueue("mail:x", {"a": 1}, tx=tx)
    ran = await app.run_until_idle()
    await app.stop()
    assert (ran.ok, ran.total) == (1, 1)
    assert threads and threads[0] != threading.get_ident()


async def test_engine_register_accepts_a_lambda_around_an_async_call() -> None:
    app = App(store="memory://", clock=FakeClock())
    seen: list[object] = []

    async def record(job: Job) -> None:
        seen.append(job.payload)

    app.pod.engine.targets.register("t", "long", lambda job: record(job))
    await app.start(workers=False)
    async with app.transaction() as tx:
        await app.enqueue("t", {"n": 1}, tx=tx)
    assert (await app.run_until_idle()).ok == 1
    await app.stop()
    assert seen == [{"n": 1}]


async def test_a_typed_payload_is_checked_at_enqueue_and_rebuilt_for_the_handler() -> None:
    app = App(store="memory://", clock=FakeClock())
    got: list[tuple[Order, int]] = []

    @app.target("erp:order", lane="long", delivery_mode="at_least_once")
    async def push(order: Order, job: Job) -> None:
        got.append((order, job.attempts))

    await app.start(workers=False)
    async with app.transaction() as tx:
        await app.enqueue("erp:order", Order("A1", 250), tx=tx)
        await app.enqueue("erp:order", {"no": "A2", "cents": 5}, tx=tx)
        with pytest.raises(InvalidArgument, match="does not fit Order"):
            await app.enqueue("erp:order", {"no": "A3"}, tx=tx)
    assert (await app.run_until_idle()).ok == 2
    await app.stop()
    assert sorted(got, key=lambda g: g[0].no) == [(Order("A1", 250), 0), (Order("A2", 5), 0)]


async def test_a_failed_run_waits_for_the_clock_then_runs_again() -> None:
    clock = FakeClock()
    app = App(store="memory://", clock=clock)
    runs: list[int] = []

    @app.target("flaky", lane="fast", delivery_mode="at_least_once")
    async def flaky(job: Job) -> None:
        runs.append(job.attempts)
        if job.attempts == 0:
            raise RuntimeError("down")

    await app.start(workers=False)
    async with app.transaction() as tx:
        await app.enqueue("flaky", None, tx=tx)
    first = await app.run_until_idle()
    assert (first.failed, first.ok) == (1, 0)
    assert (await app.run_until_idle()).total == 0  # not due before a minute
    clock.advance(minutes=1)
    assert (await app.run_until_idle()).ok == 1
    await app.stop()
    assert runs == [0, 1]


async def test_declaring_after_the_build_or_twice_is_refused() -> None:
    app = App(store="memory://")
    app.register("a", "fast", lambda job: None)
    with pytest.raises(ConfigError, match="declared twice"):
        app.register("a", "fast", lambda job: None)
    app.bind()
    with pytest.raises(ConfigError, match="already built"):
        app.register("b", "fast", lambda job: None)


async def test_run_until_idle_refuses_running_workers() -> None:
    app = App(store="memory://")
    async with app:
        with pytest.raises(ConfigError, match="runs the lanes itself"):
            await app.run_until_idle()
