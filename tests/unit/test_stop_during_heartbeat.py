"""A pod that stops while its heartbeat is taking partitions leaves holding none.

The heartbeat loop beats and then takes its fair share. When a peer leaves, the next
beat finds the peer's partitions free and takes them; if the pod is stopping at that
moment, the take may already be committed in the store while its answer is still on
the way. The stop used to release only the partitions it knew of and then cancel the
loop, so those taken ones stayed leased to a pod that had left, standing still until
the leases expired (seen as a flake of tests/integration/test_multiprocess_lanes.py
under load: a worker exited 0 still holding 21 leases). The stop now lets the loop end
before it releases, and releases every partition the store says the pod holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, timedelta

from jobledger.core.clock import FakeClock
from jobledger.reactors.runtime import Runtime
from jobledger.storage.memory import MemoryStore
from jobledger.storage.memory.coordination import MemoryCoordination
from tests.builders import make_engine


class SlowAnswers(MemoryCoordination):
    """Partition takes that, once `hold` is set up, commit at once and answer only when
    `hold` is set: a take whose answer is still on the wire."""

    hold: asyncio.Event | None = None
    taken: asyncio.Event

    async def take_partitions(
        self, partitions: Sequence[int], pod: str, now: datetime, until: datetime
    ) -> list[int]:
        got = await super().take_partitions(partitions, pod, now, until)
        if self.hold is not None and got:
            self.taken.set()
            await self.hold.wait()
        return got


class SlowAnswerStore(MemoryStore):
    """A memory store whose partition takes are `SlowAnswers`."""

    coordination: SlowAnswers

    def __init__(self) -> None:
        super().__init__(partitions=8)
        self.coordination = SlowAnswers(self.tables)
        self.coordination.taken = asyncio.Event()


async def test_a_take_in_flight_at_stop_leaves_no_lease_behind() -> None:
    store, clock = SlowAnswerStore(), FakeClock()
    engine = make_engine(store, clock, heartbeat_s=1.0, stop_timeout_s=5.0)
    a, b = Runtime(engine, pod_id="pod-a"), Runtime(engine, pod_id="pod-b")
    await a.start()
    await b.start()
    for _ in range(5):  # the two pods settle to four partitions each
        await asyncio.sleep(0.02)
        clock.advance(timedelta(seconds=1.5))
    await asyncio.sleep(0.02)
    assert sorted([len(a.leases.owned), len(b.leases.owned)]) == [4, 4]
    await b.stop()  # its four partitions are free now
    store.coordination.hold = asyncio.Event()
    clock.advance(timedelta(seconds=1.5))  # pod-a's heartbeat takes them
    await asyncio.wait_for(store.coordination.taken.wait(), 5)
    stopping = asyncio.create_task(a.stop())
    await asyncio.sleep(0.05)  # the stop goes as far as it can while the answer waits
    store.coordination.hold.set()
    await asyncio.wait_for(stopping, 10)
    assert [lease.owner for lease in await store.coordination.leases()] == [None] * 8
    assert await store.coordination.live_workers(clock.now() - timedelta(minutes=1)) == []
