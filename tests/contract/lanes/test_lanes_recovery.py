"""A round whose outcome write fails (a dropped connection, a database restarting) must
not leave its at-most-once mark holding the key: the pod writes the outcome it decided
once the store answers again. Found by the chaos run (docs/reliability.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jobledger.core.clock import FakeClock
from jobledger.domain.events import EventType
from jobledger.domain.jobs import Change
from jobledger.reactors.runtime import Runtime
from jobledger.storage.port import LeaseGuard, Store
from tests.contract.lanes_kit import Recorder, enqueue, make_engine, settle, until


class DropsOneOutcomeWrite:
    """Fault injection on a real store: the first commit that carries an outcome fails
    the way a terminated connection does, before anything is written."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.real_apply = store.writes.apply
        self.dropped = 0

    async def apply(
        self, changes: Sequence[Change], *, guard: LeaseGuard | None = None
    ) -> list[bool]:
        carries_outcome = any(e.type == EventType.JOB_SUCCEEDED for c in changes for e in c.events)
        if carries_outcome and not self.dropped:
            self.dropped += 1
            raise ConnectionResetError("server closed the connection unexpectedly")
        return await self.real_apply(changes, guard=guard)


async def test_a_failed_outcome_write_is_retried_and_the_key_moves_on(
    store: Store, clock: FakeClock, monkeypatch: Any
) -> None:
    engine = make_engine(store, clock)
    rec = Recorder()
    engine.targets.register("kafka:t", "fast", rec, delivery_mode="at_most_once")
    fault = DropsOneOutcomeWrite(store)
    monkeypatch.setattr(store.writes, "apply", fault.apply)
    runtime = Runtime(engine, pod_id="pod-a")
    await runtime.start()
    try:
        first, second = await enqueue(
            engine, "kafka:t", [{"key": "a", "version": 1}, {"key": "a", "version": 2}]
        )
        await until(lambda: fault.dropped == 1)

        async def both_done() -> bool:
            return (
                await store.admin.get_job(first) is None
                and await store.admin.get_job(second) is None
            )

        # The worker backs off 1 s (fake) after the failed round. It may start that wait
        # after any one advance, so keep the clock moving (leases renew as it does).
        for _ in range(200):
            if await both_done():
                break
            clock.advance(seconds=1)
            await settle()
        assert await both_done()
        assert [j.id for j in rec.calls] == [first, second]  # each sent exactly once, in order
        types = [e.type for e in await store.log.read_stream(f"job:{first}")]
        assert types == [EventType.JOB_ENQUEUED, EventType.JOB_DISPATCHED, EventType.JOB_SUCCEEDED]
    finally:
        await runtime.stop()
