"""Test your handlers in plain pytest: run everything due now, in the test's own task.

    app = jobledger.App(store="memory://", clock=FakeClock())
    ...declare targets...
    async with app.transaction() as tx:
        await app.enqueue("mail:welcome", {"user": 7}, tx=tx)
    ran = await app.run_until_idle()          # Ran(ok=1, failed=0, dead=0, ...)
    app.clock.advance(minutes=1)              # a failed run is retried after 1 minute
    await app.run_until_idle()

`run_until_idle` opens the store (without starting workers) if the app was not started,
ticks the schedules, then runs rounds of both lanes — real partition leases, claims,
outcomes and retries, the same code a pod runs — until a round finds nothing due. Jobs
due later (retries, `run_at`) wait until the clock gets there: with a `FakeClock` move
it by hand. docs/testing.md shows a whole test.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from jobledger.core.clock import FakeClock
from jobledger.domain.errors import ConfigError
from jobledger.observability.observe import Observer, RunRecord
from jobledger.reactors.runtime import Runtime

if TYPE_CHECKING:
    from jobledger.pod import Pod

__all__ = ["FakeClock", "Ran", "run_until_idle"]


@dataclass
class Ran:
    """The runs one `run_until_idle` call made, by result (ok, failed, dead, ...)."""

    results: Counter[str] = field(default_factory=Counter)

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
        return sum(self.results.values())


class Startable(Protocol):
    """What `run_until_idle` needs of a `jobledger.App`: its pod, and a start without
    workers when the pod has not started yet."""

    @property
    def pod(self) -> Pod: ...

    async def start(self, *, workers: bool | None = None) -> None: ...


class _Tally(Observer):
    def __init__(self) -> None:
        self.results: Counter[str] = Counter()

    def run_finished(self, record: RunRecord) -> None:
        self.results[record.result] += 1


async def run_until_idle(app: Startable, *, max_rounds: int = 1000) -> Ran:
    pod = app.pod
    if pod.runtime.started:
        raise ConfigError(
            "run_until_idle runs the lanes itself: start the app with workers=False, or not at all"
        )
    if not pod._started:
        await app.start(workers=False)
    tally = getattr(pod, "_tally", None)
    if tally is None:
        tally = _Tally()
        pod.engine.observers.add(tally)
        pod._tally = tally  # type: ignore[attr-defined]
    before = Counter(tally.results)
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
    return Ran(tally.results - before)
