"""One probe per interval for a paused target, across the partitions of a pod
(a paused target lets one probe through every 30 s).

The pause map is the pod's, shared by its partition workers. A round may be planned
before it starts (the next round planned, and its row marked, while the round before
commits), so the probe is claimed when the round starts: a partition whose probe
another partition took meanwhile sends nothing of that target in that round.
"""

from __future__ import annotations

import pytest

from jobledger.core.clock import FakeClock
from jobledger.domain.errors import TargetUnreachable
from jobledger.domain.jobs import DeliveryMode, Job, JobStatus
from jobledger.storage.port import Store
from tests.contract.lanes_kit import drain, enqueue, keys_in, one_pod
from tests.stores import all_jobs

AMO = DeliveryMode.AT_MOST_ONCE
ALO = DeliveryMode.AT_LEAST_ONCE
P1, P2 = 5, 6


@pytest.mark.parametrize("mode", [ALO, AMO])
async def test_two_partitions_spend_one_probe_per_interval(
    store: Store, clock: FakeClock, mode: DeliveryMode
) -> None:
    engine, runtime, rec = await one_pod(store, clock, mode)
    sent_up: list[Job] = []

    async def up(job: Job) -> None:
        sent_up.append(job)
        clock.advance(seconds=1)  # the send takes a second: the probe is due after it

    engine.targets.register("kafka:up", "fast", up, delivery_mode=AMO)
    rec.always = TargetUnreachable("connection refused")
    k1, k2, k3 = keys_in(P1, 3)
    ids = await enqueue(engine, "kafka:t", [{"key": k2, "payload": "a"}])
    await drain(runtime, P1)
    assert len(rec.calls) == 1 and runtime.pauses.is_paused("kafka:t")
    ids += await enqueue(engine, "kafka:t", [{"key": keys_in(P2, 1)[0], "payload": "b"}])
    await enqueue(engine, "kafka:up", [{"key": k1}, {"key": k3}])
    before = {j.id: j for j in await all_jobs(store) if j.id in ids}
    assert await drain(runtime, P2) == []  # paused, its probe not due yet
    clock.advance(seconds=29)
    # P1's round sends an up row; its next round, planned while that one commits (the
    # probe due by then), holds the paused target's probe row
    await runtime.leases.tick()
    assert await runtime.fast.step(P1) == 1
    rec.calls.clear()
    await drain(runtime, P2)
    await drain(runtime, P1)
    assert len(sent_up) == 2
    assert len(rec.calls) == 1, [j.payload for j in rec.calls]  # one probe in the interval
    unsent = [i for i in ids if i != rec.calls[0].id]
    for job_id in unsent:
        row = await store.admin.get_job(job_id)
        assert row is not None and row.status == JobStatus.PENDING
        assert row.attempts == before[job_id].attempts and row.inflight_token is None
    # the next interval: again one probe; then the target is back and both rows go
    clock.advance(seconds=30)
    await drain(runtime, P1)
    await drain(runtime, P2)
    assert len(rec.calls) == 2
    rec.always = None
    clock.advance(seconds=30)
    await drain(runtime, P1)
    await drain(runtime, P2)
    assert not runtime.pauses.is_paused("kafka:t")
    assert [j for j in await all_jobs(store) if j.id in ids] == []
