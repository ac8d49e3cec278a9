"""The Kafka target end to end: Engine + Runtime (fast lane, leases, pause map, one
outcome path) on a real store and a real tansu broker, the engine's time on a FakeClock.

Pods run with `autostart` off and the tests drive partition rounds by hand
(tests.contract.lanes_kit), so simulated days pass in milliseconds while every send is
a real produce request (or a real refused connection).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jobledger.core.clock import FakeClock
from jobledger.domain.jobs import DeliveryMode, JobStatus
from jobledger.engine import Engine
from jobledger.observability.observe import Observer, RunRecord
from jobledger.reactors.runtime import Runtime
from jobledger.storage.port import Store
from jobledger.targets.kafka.record import Record
from jobledger.targets.kafka.rules import KafkaEvent
from jobledger.targets.kafka.target import KafkaTarget, install_kafka
from tests.builders import make_engine
from tests.contract.lanes_kit import drain, enqueue, keys_in, pod
from tests.stores import all_jobs, make_store
from tests.tansu import Tansu, consume, create_topic, tansu_fixture  # noqa: F401  (fixture `tansu`)

pytestmark = pytest.mark.kafka

P = 11  # the partition every row of these tests hashes to
AMO, ALO = DeliveryMode.AT_MOST_ONCE, DeliveryMode.AT_LEAST_ONCE
EVENTS = [KafkaEvent("do_update", "orders"), KafkaEvent("audit", "audit", ALO)]


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with make_store(request.param, tmp_path) as opened:
        yield opened


@dataclass
class Pod:
    engine: Engine
    runtime: Runtime
    kafka: KafkaTarget


@pytest.fixture
async def pods(store: Store, clock: FakeClock) -> AsyncIterator[Any]:
    """Build pods (engine + kafka target + runtime) on one store; all stopped afterwards."""
    made: list[Pod] = []

    async def build(name: str, bootstrap: str, **settings: Any) -> Pod:
        engine = make_engine(store, clock, **settings)
        kafka = install_kafka(
            engine,
            EVENTS,
            bootstrap=bootstrap,
            connect_timeout_s=1.0,
            request_timeout_s=settings.pop("request_timeout_s", 5.0),
        )
        runtime = pod(engine, name)
        await kafka.start()
        made.append(Pod(engine, runtime, kafka))
        await runtime.leases.start()
        return made[-1]

    yield build
    for item in made:
        await item.runtime.fast.stop()
        await item.kafka.stop()  # after the lanes, as a pod shuts down


class Runs(Observer):
    def __init__(self) -> None:
        self.results: Counter[str] = Counter()

    def run_finished(self, record: RunRecord) -> None:
        self.results[record.result] += 1


def values(records: list[Any]) -> list[Any]:
    return [json.loads(r.value) for r in records]


async def test_outage_of_days_spends_no_attempt_and_drains_in_key_order(
    tansu: Tansu, pods: Any, store: Store, clock: FakeClock
) -> None:
    # the pod beats hourly here, so its lease outlives a beat (else every jump is a takeover)
    a = await pods("pod-a", tansu.bootstrap, partition_lease_s=7200.0, worker_live_s=7200.0)
    keys = keys_in(P, 4)
    tansu.kill()  # Kafka is down before anything was sent
    items = [
        {"key": k, "version": v, "payload": {"k": k, "v": v}, "code": "do_update"}
        for v in (2, 1)
        for k in reversed(keys)  # enqueued out of order on purpose
    ]
    runs = Runs()
    a.engine.observers.add(runs)
    ids = await enqueue(a.engine, "kafka:orders", items)
    assert await drain(a.runtime, P) == [1]  # one row ran, refused: the target paused
    assert a.runtime.pauses.is_paused("kafka:orders")
    for _ in range(3 * 24):  # three days, an hour at a time: one probe per hour
        clock.advance(hours=1)
        await drain(a.runtime, P)
    assert runs.results == {"deferred": 1 + 72}  # every probe a real refused connection
    for job_id in ids:
        row = await store.admin.get_job(job_id)
        assert row is not None and row.status == JobStatus.PENDING and row.attempts == 0
    events = await store.log.read_stream(f"job:{ids[0]}")
    assert all(e.type != "JobFailed" for e in events)
    # Kafka is back (an empty broker): the next probe goes through and the backlog drains
    await tansu.start()
    await create_topic(tansu.bootstrap, "orders")
    clock.advance(seconds=30)
    await drain(a.runtime, P)
    assert not a.runtime.pauses.is_paused("kafka:orders")
    assert await all_jobs(store) == []
    records = await consume(tansu.bootstrap, "orders", len(items))
    expected = [{"k": k, "v": v} for k in keys for v in (1, 2)]  # key order, then version
    assert values(records) == expected
    assert [r.key.decode() for r in records] == [e["k"] for e in expected]
    assert {dict(r.headers)["event_id"].decode() for r in records} == set(ids)
    assert runs.results == {"deferred": 73, "ok": len(items)}  # no attempt spent, none DEAD


async def warm(kafka: KafkaTarget, *topics: str) -> None:
    """One record per topic, so the producer has the topics' metadata before the broker
    hangs (a send waiting for metadata has not left the pod: that is another case)."""
    for topic in topics:
        await kafka.send(Record(topic, b"warm", b'"warm"', ()))


async def _send_in_flight(runtime: Runtime, tansu: Tansu) -> asyncio.Task[int | None]:
    """Start a round of P on `runtime` while the broker hangs: its sends are written to the
    socket and wait for an answer."""
    tansu.freeze()
    task = asyncio.create_task(runtime.fast.step(P))
    await asyncio.sleep(0.4)
    assert not task.done()
    return task


async def test_takeover_with_at_most_once_and_at_least_once_rows_in_flight(
    tansu: Tansu, pods: Any, store: Store, clock: FakeClock
) -> None:
    a = await pods("pod-a", tansu.bootstrap)
    k1, k2 = keys_in(P, 2)
    await create_topic(tansu.bootstrap, "orders")
    await create_topic(tansu.bootstrap, "audit")
    await warm(a.kafka, "orders", "audit")
    (amo_id,) = await enqueue(a.engine, "kafka:orders", [{"key": k1, "payload": {"n": 1}}])
    (alo_id,) = await enqueue(a.engine, "kafka:audit", [{"key": k2, "payload": {"n": 2}}])
    round_a = await _send_in_flight(a.runtime, tansu)
    marked = await store.queue.inflight(P)
    assert [j.id for j in marked] == [amo_id]  # at-most-once: marked before the send
    round_a.cancel()  # pod-a dies with both sends out: no outcome is ever written
    with pytest.raises(asyncio.CancelledError):
        await round_a
    tansu.thaw()  # the broker wakes and appends what pod-a sent

    clock.advance(seconds=31)
    b = await pods("pod-b", tansu.bootstrap)  # takes the expired partition over
    assert P in b.runtime.leases.owned
    dead = await store.admin.get_job(amo_id)
    assert dead is not None and dead.status == JobStatus.DEAD
    assert dead.dead_reason == "in flight when its partition was taken over"
    await drain(b.runtime, P)
    assert await store.admin.get_job(alo_id) is None  # resent by pod-b and done
    audit = (await consume(tansu.bootstrap, "audit", 3))[1:]
    orders = (await consume(tansu.bootstrap, "orders", 2))[1:]
    # at-least-once: pod-a's send landed and pod-b sent it again; one event_id
    assert values(audit) == [{"n": 2}, {"n": 2}]
    assert {dict(r.headers)["event_id"] for r in audit} == {alo_id.encode()}
    # at-most-once: never resent (it may have landed once; here it did)
    assert values(orders) == [{"n": 1}]
    assert len(await consume(tansu.bootstrap, "orders", 3, timeout_s=1.0)) == 2


async def test_stall_past_the_lease_sends_nothing_more_and_its_late_outcome_is_lost(
    tansu: Tansu, pods: Any, store: Store, clock: FakeClock
) -> None:
    a = await pods("pod-a", tansu.bootstrap)
    keys = keys_in(P, 3)
    await create_topic(tansu.bootstrap, "orders")
    await warm(a.kafka, "orders")
    ids = await enqueue(a.engine, "kafka:orders", [{"key": k, "payload": {"k": k}} for k in keys])
    round_a = await _send_in_flight(a.runtime, tansu)  # pod-a stalls on a hung broker
    clock.advance(seconds=31)  # ... past its 30 s lease
    b = await pods("pod-b", tansu.bootstrap)
    assert P in b.runtime.leases.owned
    first = await store.admin.get_job(ids[0])
    assert first is not None and first.status == JobStatus.DEAD  # judged by the takeover
    tansu.thaw()
    assert await round_a == 1  # pod-a's send completes late; its outcome write loses
    still = await store.admin.get_job(ids[0])
    assert still is not None and still.status == JobStatus.DEAD
    assert await drain(a.runtime, P, tick=False) == []  # its own clock says: lease gone
    assert a.runtime.fast.workers[P].lost
    await drain(b.runtime, P)
    assert await store.admin.get_job(ids[1]) is None and await store.admin.get_job(ids[2]) is None
    records = (await consume(tansu.bootstrap, "orders", 4))[1:]
    assert values(records) == [{"k": k} for k in keys]  # each once: nothing sent twice


async def test_kafka_disabled_rows_wait_paused_and_nothing_is_sent(
    tansu: Tansu, pods: Any, store: Store, clock: FakeClock
) -> None:
    a = await pods(
        "pod-a",
        tansu.bootstrap,
        kafka_enabled=False,
        partition_lease_s=7200.0,
        worker_live_s=7200.0,
    )
    (job_id,) = await enqueue(a.engine, "kafka:orders", [{"key": keys_in(P, 1)[0], "payload": 1}])
    await drain(a.runtime, P)
    for _ in range(10):
        clock.advance(minutes=30)
        await drain(a.runtime, P)
    row = await store.admin.get_job(job_id)
    assert row is not None and row.status == JobStatus.PENDING and row.attempts == 0
    assert a.runtime.pauses.is_paused("kafka:orders")
    assert a.kafka._producer is None
    assert await consume(tansu.bootstrap, "orders", 1, timeout_s=1.0) == []
