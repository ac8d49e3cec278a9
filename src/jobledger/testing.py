"""Test your handlers in plain pytest: run everything due now, in the test's own task.

    async with app.testing(clock=FakeClock()) as t:   # memory store, targets kept
        async with app.transaction() as tx:
            await app.enqueue("mail:welcome", {"user": 7}, tx=tx)
        ran = await t.run_until_idle()    # Ran: each run's result and exception
        t.clock.advance(minutes=1)        # a failed run is retried after 1 minute
        await t.run_until_idle()

`App.testing` swaps the app's store and clock for the block's (the memory store and a
`FakeClock` by default), keeping every target and schedule the module declared, so the
code under test enqueues on `app` as it does in production; the app's own store is back
after the block. `run_until_idle` ticks the schedules, then runs rounds of both lanes —
real partition leases, claims, outcomes and retries, the same code a pod runs — until a
round finds nothing due, and reports each run: its job, its result and, for a failed
one, the exception the handler raised. Jobs due later (retries, `run_at`) wait until
the clock gets there: with a `FakeClock`, move it by hand. docs/testing.md shows a
whole test.
"""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from jobledger.core.clock import FakeClock
from jobledger.domain.errors import ConfigError
from jobledger.domain.jobs import Job
from jobledger.observability.observe import Observer, RunRecord
from jobledger.reactors.runtime import Runtime

if TYPE_CHECKING:
    from jobledger.pod import Pod

__all__ = ["FakeClock", "Ran", "Run", "TestRun", "run_until_idle"]

#: run results that are not a failure
QUIET = frozenset({"ok", "skipped"})


@dataclass(frozen=True, slots=True)
class Run:
    """One run of one job: its result (ok, failed, deferred, dead, skipped, …), the error
    line the engine recorded, and the exception the handler raised (under
    `App.testing`, which sees the handlers; None otherwise, and for a run that passed)."""

    job: Job
    result: str
    attempts: int
    error: str | None = None
    exception: BaseException | None = None

    @property
    def job_id(self) -> str:
        return self.job.id


@dataclass
class Ran:
    """The runs one `run_until_idle` call made, in order, and their count by result."""

    runs: list[Run] = field(default_factory=list)

    @property
    def results(self) -> Counter[str]:
        return Counter(run.result for run in self.runs)

    @property
    def ok(self) -> int:
        return self.results["ok"]

    @property
    def failed(self) -> int:
        return self.results["failed"]

    @property
    def dead(self) -> int:
        return self.results["dead"]

    @property
    def total(self) -> int:
        return len(self.runs)

    @property
    def failures(self) -> list[Run]:
        """The runs that did not end ok or skipped."""
        return [run for run in self.runs if run.result not in QUIET]

    def raise_failures(self) -> None:
        """Raise the first failure's exception (its error line, when the exception was
        not seen), so a test that expects every run to pass shows why one did not."""
        for run in self.failures:
            if run.exception is not None:
                raise run.exception
            raise AssertionError(f"job {run.job_id} ({run.job.target}): {run.result}: {run.error}")

    def __str__(self) -> str:
        lines = [f"{self.total} runs: {dict(self.results)}"]
        lines += [
            f"  {run.job.target} {run.job_id} {run.result}: {run.exception or run.error}"
            for run in self.failures
        ]
        return "\n".join(lines)


class Startable(Protocol):
    """What `run_until_idle` needs of a `jobledger.App`: its pod, and a start without
    workers when the pod has not started yet."""

    @property
    def pod(self) -> Pod: ...

    async def start(self, *, workers: bool | None = None) -> None: ...


Handler = Callable[[Job], Awaitable[object]]


class Failures:
    """The exception each job's last run raised, seen by wrapping the handlers."""

    def __init__(self) -> None:
        self.raised: dict[str, BaseException] = {}

    def wrap(self, handler: Handler) -> Handler:
        raised = self.raised

        @functools.wraps(handler)
        async def run(job: Job) -> object:
            try:
                return await handler(job)
            except asyncio.CancelledError:
                raise  # not the handler's failure: its timeout (or the test) cancelled it
            except BaseException as exc:
                raised[job.id] = exc
                raise

        return run


class _Tally(Observer):
    def __init__(self, failures: Failures | None) -> None:
        self.runs: list[Run] = []
        self.failures = failures

    def run_finished(self, record: RunRecord) -> None:
        exception = None
        if self.failures is not None:
            exception = self.failures.raised.pop(record.job.id, None)
        if record.result in QUIET:
            exception = None
        self.runs.append(Run(record.job, record.result, record.attempts, record.error, exception))


@dataclass
class TestRun:
    """What `App.testing` yields: the app (now on the test's store and clock), its pod,
    the clock, and `run_until_idle`."""

    __test__ = False  # not a pytest test class

    app: Startable
    pod: Pod
    clock: Any
    failures: Failures

    @property
    def store(self) -> Any:
        return self.pod.store

    async def run_until_idle(self, *, max_rounds: int = 1000) -> Ran:
        return await run_until_idle(self.app, max_rounds=max_rounds)


def _tally_of(pod: Pod) -> _Tally:
    tally: _Tally | None = getattr(pod, "_tally", None)
    if tally is None:
        tally = _Tally(getattr(pod, "_failures", None))
        pod.engine.observers.add(tally)
        pod._tally = tally  # type: ignore[attr-defined]
    return tally


async def run_until_idle(app: Startable, *, max_rounds: int = 1000) -> Ran:
    pod = app.pod
    if pod.runtime.started:
        raise ConfigError(
            "run_until_idle runs the lanes itself: start the app with workers=False, or not at all"
        )
    if not pod._started:
        await app.start(workers=False)
    tally = _tally_of(pod)
    runs: list[Run] = []
    tally.runs = runs  # this call's runs
    runtime = Runtime(pod.engine, pod_id="run-until-idle")
    runtime.fast.autostart = False
    await runtime.leases.start()
    try:
        for _ in range(max_rounds):
            busy = len(await pod.scheduler.tick())
            for partition in sorted(runtime.fast.workers):
                while (sent := await runtime.fast.step(partition)) is not None:
                    busy += sent
            rows = await runtime.long.reserve()
            if rows:
                await runtime.long.run_batch(rows)
                busy += len(rows)
            if not busy:
                break
        else:
            raise RuntimeError(f"still busy after {max_rounds} rounds")
    finally:
        await runtime.fast.stop()
        await runtime.committer.close()
        await runtime.leases.release_all()
    return Ran(runs)
