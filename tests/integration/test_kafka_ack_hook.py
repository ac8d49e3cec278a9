"""`KafkaTarget.on_ack`: the opt-in hook the chaos harness logs acknowledgements with.
Each job's handler reports the broker's acknowledgement of *its own* record —
on the first send (which builds the producer and goes through `send`) and on the warm
path (`Appender.append` into the producer's open batch) — before it returns, and a
failed send reports nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jobledger.domain.errors import TargetUnreachable
from jobledger.domain.jobs import Job
from jobledger.targets.kafka.target import KafkaTarget, ProducerOptions
from tests.integration.test_kafka_target import make_job, run
from tests.tansu import Tansu, closed_port, consume, tansu_fixture  # noqa: F401  (fixture `tansu`)

pytestmark = pytest.mark.kafka


async def test_every_ack_is_the_jobs_own_record(tansu: Tansu) -> None:
    target = KafkaTarget(ProducerOptions(tansu.bootstrap, connect_timeout_s=2.0))
    acks: list[tuple[str, Any]] = []
    target.on_ack = lambda job, meta: acks.append((job.id, meta))
    jobs: list[Job] = [make_job("acks", {"n": n}, key=f"K{n % 3}") for n in range(30)]
    try:
        await run(target, jobs[0])  # cold: builds the producer, through `send`
        assert target._appender is not None  # the rest may take the warm path
        await asyncio.gather(*(run(target, job) for job in jobs[1:]))
    finally:
        await target.stop()
    assert sorted(job_id for job_id, _ in acks) == sorted(job.id for job in jobs)
    records = await consume(tansu.bootstrap, "acks", 30)
    at = {(r.partition, r.offset): dict(r.headers)["event_id"].decode() for r in records}
    for job_id, meta in acks:
        assert meta.topic == "acks"
        assert at[(meta.partition, meta.offset)] == job_id


async def test_a_failed_send_reports_no_ack() -> None:
    target = KafkaTarget(ProducerOptions(closed_port(), connect_timeout_s=0.5))
    acks: list[Any] = []
    target.on_ack = lambda job, meta: acks.append(meta)
    try:
        with pytest.raises(TargetUnreachable):
            await run(target, make_job("acks", {"n": 1}))
    finally:
        await target.stop()
    assert acks == []
