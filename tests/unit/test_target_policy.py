"""`@app.target(retry=..., timeout_s=...)`: what registration refuses (and when), which
maximum of runs applies, and the timeout wrapper on the system clock and a fake one."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

import pytest

import jobledger
from jobledger import App, Backoff
from jobledger.config.settings import Settings
from jobledger.core.clock import FakeClock, SystemClock
from jobledger.core.registry import RunLimits, TargetRegistry, with_timeout
from jobledger.domain.errors import ConfigError, InvalidArgument, RunTimedOut
from jobledger.domain.jobs import DeliveryMode, Job
from jobledger.domain.run_policy import RetryDelays
from jobledger.engine import Engine
from jobledger.storage.memory.store import MemoryStore
from tests.builders import a_job


async def noop(job: Job) -> None:
    return None


def test_backoff_and_run_timed_out_are_exported() -> None:
    assert jobledger.Backoff is Backoff
    assert issubclass(jobledger.RunTimedOut, Exception)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"retry": []}, "target 'mail:x': retry needs at least one delay"),
        ({"retry": [5, -1]}, "target 'mail:x': a retry delay must be between 0 and"),
        ({"retry": "5m"}, "target 'mail:x': retry must be a list of delays or a Backoff"),
        ({"timeout_s": -2}, "target 'mail:x': timeout_s must be a positive number"),
        ({"timeout_s": "10"}, "target 'mail:x': timeout_s must be a positive number"),
    ],
)
def test_bad_values_are_refused_at_the_decorator(options: dict[str, object], words: str) -> None:
    app = App(store="memory://")
    with pytest.raises(InvalidArgument) as caught:
        app.target("mail:x", **options)  # type: ignore[arg-type]
    assert caught.value.message.startswith(words) and "\n" not in caught.value.message


@pytest.mark.parametrize(
    ("lane", "timeout_s", "words"),
    [
        ("fast", 1.0, "timeout_s=1 cannot finish within the 0.5 s a fast-lane send may start"),
        ("long", 20.0, "timeout_s=20 cannot finish within the long-lane claim lease"),
    ],
)
async def test_a_timeout_beyond_the_lease_is_refused_before_any_job_runs(
    lane: str, timeout_s: float, words: str
) -> None:
    settings = Settings(partition_lease_s=2, heartbeat_s=1, long_lease_s=20, long_heartbeat_s=5)
    app = App(store="memory://", settings=settings, clock=FakeClock())
    ran: list[Job] = []

    @app.target("slow", lane=lane, timeout_s=timeout_s)  # settings may still change: accepted
    async def slow(job: Job) -> None:
        ran.append(job)

    with pytest.raises(ConfigError) as caught:
        await app.start(workers=False)  # the pod is built from the final settings
    assert caught.value.message.startswith(f"target 'slow': {words}")
    assert "\n" not in caught.value.message and ran == []
    with pytest.raises(ConfigError):  # and so is the test harness's pod
        async with app.testing(settings=settings):
            pass


def test_engine_checks_targets_registered_before_it_and_after() -> None:
    registry = TargetRegistry()
    registry.register("report", "long", noop, timeout_s=400)
    with pytest.raises(ConfigError, match=r"^target 'report': timeout_s=400 .*long_lease_s=300"):
        Engine(MemoryStore(), targets=registry)
    engine = Engine(MemoryStore())
    engine.targets.register("fine", "long", noop, timeout_s=299)
    with pytest.raises(ConfigError, match=r"^target 'kafka:t': timeout_s=8 .*partition_lease_s=30"):
        engine.targets.register("kafka:t", "fast", noop, timeout_s=8)
    assert "kafka:t" not in engine.targets


def test_a_target_keeps_its_policy_through_a_mode_switch() -> None:
    engine = Engine(MemoryStore())
    before = engine.targets.register("kafka:t", "fast", noop, retry=[5, 10], timeout_s=2)
    engine.targets.replace_delivery_mode("kafka:t", DeliveryMode.AT_LEAST_ONCE)
    after = engine.targets.get("kafka:t")
    assert after.delivery_mode == DeliveryMode.AT_LEAST_ONCE
    assert (after.retry, after.timeout_s, after.handler) == (
        before.retry,
        before.timeout_s,
        before.handler,
    )


def test_max_attempts_per_code_then_the_target_policy_then_the_default() -> None:
    registry = TargetRegistry(default_max_attempts=6)
    listed = registry.register("a", "long", noop, retry=[5, 10])
    backoff = registry.register("b", "long", noop, retry=Backoff(base_s=1, attempts=9))
    open_ended = registry.register("c", "long", noop, retry=Backoff(base_s=1))
    plain = registry.register("d", "long", noop)
    assert listed.retry == RetryDelays((5.0, 10.0))
    assert registry.max_attempts("a", listed) == 3
    assert registry.max_attempts("b", backoff) == 9
    assert registry.max_attempts("c", open_ended) == 6
    assert registry.max_attempts("d", plain) == 6
    registry.set_max_attempts("a", 4)  # a per-code maximum wins
    assert registry.max_attempts("a", listed) == 4


def test_a_target_without_timeout_keeps_its_handler_as_it_is() -> None:
    engine = Engine(MemoryStore())
    target = engine.targets.register("kafka:t", "fast", noop)
    assert target.handler is noop and target.timeout_s is None


# --- the timeout wrapper --------------------------------------------------------------


async def test_on_the_system_clock_a_sleeping_handler_is_cancelled() -> None:
    cancelled = asyncio.Event()

    async def sleeps(job: Job) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    timed = with_timeout(sleeps, "slow", 0.05, SystemClock())
    with pytest.raises(RunTimedOut, match=r"^timeout: the run of slow took longer than"):
        await asyncio.wait_for(timed(a_job()), 5)
    assert cancelled.is_set()


async def test_a_timeout_error_of_the_handler_itself_is_left_as_it_is() -> None:
    async def raises(job: Job) -> None:
        raise TimeoutError("the SMTP server did not answer")

    for clock in (SystemClock(), FakeClock()):
        with pytest.raises(TimeoutError, match="SMTP") as caught:
            await with_timeout(raises, "t", 5, clock)(a_job())
        assert not isinstance(caught.value, RunTimedOut)


async def test_on_a_fake_clock_the_timeout_fires_when_the_clock_gets_there() -> None:
    clock = FakeClock()
    entered = asyncio.Event()

    async def waits(job: Job) -> str:
        entered.set()
        await asyncio.Event().wait()
        return "never"

    run = asyncio.ensure_future(with_timeout(waits, "slow", 10, clock)(a_job()))
    await entered.wait()
    clock.advance(seconds=9.999)
    await asyncio.sleep(0.01)
    assert not run.done()
    clock.advance(milliseconds=1)
    with pytest.raises(RunTimedOut):
        await asyncio.wait_for(run, 5)


async def test_a_fake_clock_moved_before_the_alarm_starts_still_times_out() -> None:
    """The deadline is fixed when the run starts, not when the alarm's task first runs."""
    clock = FakeClock()

    async def waits(job: Job) -> None:
        await asyncio.Event().wait()

    run = asyncio.ensure_future(with_timeout(waits, "slow", 10, clock)(a_job()))
    await asyncio.sleep(0)  # the run started and set its alarm, which has not run yet
    clock.advance(seconds=10)
    with pytest.raises(RunTimedOut):
        await asyncio.wait_for(run, 2)


async def test_a_handler_done_in_time_returns_its_value_on_both_clocks() -> None:
    async def quick(job: Job) -> str:
        return "sent"

    for clock in (SystemClock(), FakeClock()):
        assert await with_timeout(quick, "t", 5, clock)(a_job()) == "sent"


async def test_a_thread_handler_runs_on_after_its_timeout() -> None:
    """A thread cannot be stopped: the run is recorded as timed out while the function
    goes on to its end."""
    clock = FakeClock()
    release, finished = threading.Event(), threading.Event()

    def blocking(job: Job) -> None:
        release.wait(10)
        finished.set()

    engine = Engine(MemoryStore(), clock=clock)
    target = engine.targets.register("smtp", "long", blocking, timeout_s=60)
    run = asyncio.ensure_future(target.handler(a_job()))
    await asyncio.sleep(0.05)
    clock.advance(minutes=1)
    with pytest.raises(RunTimedOut):
        await asyncio.wait_for(run, 5)
    assert not finished.is_set()  # the engine stopped waiting; the thread did not stop
    release.set()
    assert await asyncio.to_thread(finished.wait, 5)


def test_limits_hold_the_clock_and_both_leases() -> None:
    limits = RunLimits(FakeClock(), 30.0, 300.0)
    registry = TargetRegistry()
    registry.bind(limits)
    with pytest.raises(ConfigError, match="already bound"):
        registry.bind(limits)
    assert registry.register("x", "long", noop, timeout_s=timedelta(seconds=5)).timeout_s == 5


async def test_app_testing_reports_a_timed_out_run_as_failed_not_cancelled() -> None:
    app = App(store="memory://")
    entered = asyncio.Event()

    @app.target("slow", lane="long", delivery_mode="at_least_once", timeout_s=60, retry=[5])
    async def slow(job: Job) -> None:
        entered.set()
        await asyncio.Event().wait()

    async with app.testing() as t:
        async with app.transaction() as tx:
            await app.enqueue("slow", {}, tx=tx)
        running = asyncio.ensure_future(t.run_until_idle())
        await asyncio.wait_for(entered.wait(), 5)
        t.clock.advance(minutes=1)
        ran = await asyncio.wait_for(running, 5)
    (run,) = ran.failures
    assert run.result == "failed" and run.error is not None and run.error.startswith("timeout: ")
    assert run.exception is None  # the cancellation the timeout used is not the handler's error
