"""The Kafka target against a real broker (tansu): records, topics and every error class.

The handler is called directly here, inside the job context the lanes open; the
end-to-end tests through Engine + Runtime are in test_kafka_lanes.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from jobledger.core import context
from jobledger.core.ids import new_id
from jobledger.domain import job_commands
from jobledger.domain.errors import DeadNow, TargetOutcomeUnknown, TargetUnreachable
from jobledger.domain.events import Actor
from jobledger.domain.jobs import Job, Lane, NewJob, Stamp
from jobledger.targets.kafka.rules import KafkaEvent
from jobledger.targets.kafka.target import KafkaTarget, ProducerOptions
from tests.tansu import Tansu, closed_port, consume, create_topic, tansu_fixture  # noqa: F401  (fixture `tansu`)

pytestmark = pytest.mark.kafka

TRACEPARENT = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"


def make_job(
    topic: str,
    payload: Any = None,
    *,
    code: str | None = None,
    key: str | None = "DO-1",
    headers: dict[str, str] | None = None,
) -> Job:
    job_id = new_id()
    change = job_commands.enqueued(
        job_id=job_id,
        spec=NewJob(f"kafka:{topic}", payload, code, key, 0, None, headers),
        code=code or f"kafka:{topic}",
        lane=Lane.FAST,
        partition=0,
        dedupe_key=job_id,
        stamp=Stamp(datetime(2026, 3, 2, tzinfo=UTC), None, "a" * 32),
        traceparent=TRACEPARENT,
    )
    assert isinstance(change.row, Job)
    return change.row


async def run(target: KafkaTarget, job: Job) -> None:
    """Call the handler as the lanes do: inside the enqueuer's context."""
    with context.job_context(job.trace_id, job.traceparent, Actor(id="u1")):
        await target(job)


def count_sends(producer: Any) -> list[Any]:
    """Wrap `producer.send` so each call that takes it (the cold path) is recorded."""
    sent = producer.send
    calls: list[Any] = []

    async def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return await sent(*args, **kwargs)

    producer.send = counting
    return calls


@pytest.fixture
async def make_target() -> AsyncIterator[Any]:
    """Build KafkaTargets with short timeouts; every one is stopped afterwards."""
    made: list[KafkaTarget] = []

    def build(bootstrap: str, **kwargs: Any) -> KafkaTarget:
        options = ProducerOptions(
            bootstrap,
            connect_timeout_s=kwargs.pop("connect_timeout_s", 1.0),
            request_timeout_s=kwargs.pop("request_timeout_s", 1.5),
            max_request_size=kwargs.pop("max_request_size", 1_048_576),
            max_batch_size=kwargs.pop("max_batch_size", 262_144),
        )
        target = KafkaTarget(options, **kwargs)
        made.append(target)
        return target

    yield build
    for target in made:
        await target.stop()


async def test_record_key_value_headers_topic_and_override(tansu: Tansu, make_target: Any) -> None:
    events = [KafkaEvent("do_update_oms", "orders")]
    target = make_target(
        tansu.bootstrap, events=events, topic_overrides={"do_update_oms": "orders.v2"}
    )
    await target.start()
    plain = make_job("orders", {"no": "DO-1", "status": "ชำระแล้ว"}, headers={"x-src": "tms"})
    overridden = make_job(
        "orders", {"no": "DO-2"}, code="do_update_oms", key="DO-2", headers={"event_id": "evt-2"}
    )
    await run(target, plain)
    await run(target, overridden)

    [got] = await consume(tansu.bootstrap, "orders", 1)
    assert got.key == b"DO-1"
    assert got.value == '{"no":"DO-1","status":"ชำระแล้ว"}'.encode()
    assert dict(got.headers) == {
        "event_id": plain.id.encode(),
        "x-src": b"tms",
        "traceparent": TRACEPARENT.encode(),
        "trace_id": b"a" * 32,
    }
    [moved] = await consume(tansu.bootstrap, "orders.v2", 1)
    assert moved.key == b"DO-2"
    assert json.loads(moved.value) == {"no": "DO-2"}
    assert dict(moved.headers)["event_id"] == b"evt-2"  # the job's header wins


async def test_one_key_keeps_its_order(tansu: Tansu, make_target: Any) -> None:
    target = make_target(tansu.bootstrap)
    for version in range(20):
        await run(target, make_job("seq", {"v": version}, key="K"))
    records = await consume(tansu.bootstrap, "seq", 20)
    assert [json.loads(r.value)["v"] for r in records] == list(range(20))
    assert {r.partition for r in records} == {records[0].partition}


async def test_broker_not_running_is_unreachable(make_target: Any) -> None:
    target = make_target(closed_port())
    started = time.monotonic()
    with pytest.raises(TargetUnreachable, match="kafka not_sent"):
        await run(target, make_job("orders", {"a": 1}))
    assert time.monotonic() - started < 1.5  # refused at once, no client retries
    # start() does not fail either: a pod boots while Kafka is down
    await target.start()


async def test_hung_broker_at_connect_is_unreachable_within_the_connect_timeout(
    tansu: Tansu, make_target: Any
) -> None:
    target = make_target(tansu.bootstrap, connect_timeout_s=0.5)
    tansu.freeze()
    started = time.monotonic()
    with pytest.raises(TargetUnreachable):
        await run(target, make_job("orders", {"a": 1}))
    assert time.monotonic() - started < 1.4
    tansu.thaw()


async def test_metadata_wait_on_a_hung_broker_is_unreachable_within_the_connect_timeout(
    tansu: Tansu, make_target: Any
) -> None:
    """A warm producer, a topic it has no metadata for, a broker that answers nothing:
    the send waits before its record is queued, bounded like a connect."""
    target = make_target(tansu.bootstrap, connect_timeout_s=0.5, request_timeout_s=5.0)
    await run(target, make_job("orders", {"warm": True}))
    tansu.freeze()
    started = time.monotonic()
    with pytest.raises(TargetUnreachable, match="not_sent"):
        await run(target, make_job("unseen", {"a": 1}))
    assert time.monotonic() - started < 1.4
    tansu.thaw()


async def test_broker_killed_mid_send_is_outcome_unknown(tansu: Tansu, make_target: Any) -> None:
    target = make_target(tansu.bootstrap, request_timeout_s=5.0)
    await run(target, make_job("orders", {"warm": True}))
    tansu.freeze()  # the next request is written to the socket and gets no answer
    send = asyncio.ensure_future(run(target, make_job("orders", {"a": 1})))
    await asyncio.sleep(0.3)
    assert not send.done()
    tansu.kill()  # the connection drops with the request out
    with pytest.raises(TargetOutcomeUnknown) as info:
        await send
    assert info.value.target_up is False
    assert "KafkaConnectionError" in str(info.value)
    # and while it stays down, nothing is sent: unreachable
    with pytest.raises(TargetUnreachable):
        await run(target, make_job("orders", {"a": 2}))


async def test_hung_broker_times_out_with_target_up_and_the_record_was_written(
    tansu: Tansu, make_target: Any
) -> None:
    """Measured fact (aiokafka 0.14, tansu 0.6): the timed-out record *was* appended,
    so an at-least-once resend duplicates it; consumers dedupe on `event_id`."""
    target = make_target(tansu.bootstrap, request_timeout_s=1.0)
    await run(target, make_job("hung", {"n": 0}))
    tansu.freeze()
    job = make_job("hung", {"n": 1})
    started = time.monotonic()
    with pytest.raises(TargetOutcomeUnknown) as info:
        await run(target, job)
    assert info.value.target_up is True
    assert "RequestTimedOutError" in str(info.value)
    assert time.monotonic() - started < 2.5
    tansu.thaw()
    await run(target, make_job("hung", {"n": 2}))  # a new producer, the broker is back
    records = await consume(tansu.bootstrap, "hung", 3)
    assert [json.loads(r.value)["n"] for r in records] == [0, 1, 2]
    assert dict(records[1].headers)["event_id"] == job.id.encode()


async def test_invalid_records_are_dead_now(tansu: Tansu, make_target: Any) -> None:
    target = make_target(tansu.bootstrap, max_request_size=1000)
    with pytest.raises(DeadNow, match="needs a key or a value"):
        await run(target, make_job("orders", None, key=None))
    assert target._producer is None  # rejected before any connection
    with pytest.raises(DeadNow, match="MessageSizeTooLargeError"):
        await run(target, make_job("orders", {"blob": "x" * 2000}))
    await run(target, make_job("orders", {"small": True}))  # the producer is still fine
    assert len(await consume(tansu.bootstrap, "orders", 1, timeout_s=3)) == 1


async def test_tombstone_for_a_job_without_payload(tansu: Tansu, make_target: Any) -> None:
    target = make_target(tansu.bootstrap)
    await run(target, make_job("compacted", None, key="DO-9"))
    [record] = await consume(tansu.bootstrap, "compacted", 1)
    assert record.key == b"DO-9" and record.value is None


async def test_disabled_kafka_sends_nothing_and_never_connects(
    tansu: Tansu, make_target: Any
) -> None:
    target = make_target(tansu.bootstrap, enabled=False)
    await target.start()
    with pytest.raises(TargetUnreachable, match="disabled"):
        await run(target, make_job("off", {"a": 1}))
    assert target._producer is None
    assert await consume(tansu.bootstrap, "off", 1, timeout_s=1.5) == []


async def test_broker_restart_recovers_with_a_new_producer(tansu: Tansu, make_target: Any) -> None:
    target = make_target(tansu.bootstrap)
    await run(target, make_job("back", {"n": 1}))
    tansu.kill()
    with pytest.raises(TargetUnreachable):
        await run(target, make_job("back", {"n": 2}))
    await tansu.start()  # same port, empty broker
    await run(target, make_job("back", {"n": 3}))
    records = await consume(tansu.bootstrap, "back", 1)
    assert [json.loads(r.value)["n"] for r in records] == [3]


async def test_a_send_after_stop_is_unreachable_not_an_answered_failure(
    tansu: Tansu, make_target: Any
) -> None:
    target = make_target(tansu.bootstrap)
    await run(target, make_job("late", {"n": 1}))
    await target.stop()
    with pytest.raises(TargetUnreachable, match="stopped"):
        await run(target, make_job("late", {"n": 2}))
    assert len(await consume(tansu.bootstrap, "late", 2, timeout_s=1.5)) == 1


async def test_warm_sends_skip_the_send_coroutine_and_land_where_aiokafka_puts_them(
    tansu: Tansu, make_target: Any
) -> None:
    """Once the producer knows the topic, records are appended without `send` (the
    target's no-wait path): same partition as aiokafka's default partitioner, same
    bytes, every one delivered."""
    from aiokafka.partitioner import DefaultPartitioner

    await create_topic(tansu.bootstrap, "spread", 4)
    target = make_target(tansu.bootstrap)
    await run(target, make_job("spread", {"warm": True}, key="warm"))
    assert target._appender is not None
    slow = count_sends(target._producer)
    keys = [f"DO-{n:03d}" for n in range(40)]
    await asyncio.gather(*(run(target, make_job("spread", {"k": key}, key=key)) for key in keys))
    assert slow == []
    assert target._appender._direct is True  # and batches appended to inline
    records = await consume(tansu.bootstrap, "spread", 41)
    default = DefaultPartitioner()
    assert len(records) == 41
    for record in records:
        assert record.partition == default(record.key, [0, 1, 2, 3], [0, 1, 2, 3])
        if record.key != b"warm":
            assert json.loads(record.value) == {"k": record.key.decode()}
            assert set(dict(record.headers)) == {"event_id", "traceparent", "trace_id"}


async def test_a_full_batch_on_a_warm_producer_takes_send_and_loses_nothing(
    tansu: Tansu, make_target: Any
) -> None:
    """The inline append closes a batch that has no room and the record takes `send`
    (which waits for a new batch): every record arrives once, each key's in order."""
    await create_topic(tansu.bootstrap, "small-batches", 1)
    target = make_target(tansu.bootstrap, max_batch_size=1024)
    await run(target, make_job("small-batches", {"warm": True}, key="warm"))
    slow = count_sends(target._producer)

    async def versions(key: str) -> None:
        for version in range(3):
            await run(target, make_job("small-batches", {"v": version, "pad": "x" * 80}, key=key))

    await asyncio.gather(*(versions(f"DO-{n:03d}") for n in range(30)))
    assert slow  # some records found their batch full
    assert target._appender._direct is True
    records = await consume(tansu.bootstrap, "small-batches", 91)
    assert len(records) == 91
    seen: dict[bytes, list[int]] = {}
    for record in records[1:]:
        seen.setdefault(record.key, []).append(json.loads(record.value)["v"])
    assert seen == {f"DO-{n:03d}".encode(): [0, 1, 2] for n in range(30)}


async def test_an_oversize_record_on_a_warm_producer_is_dead_now(
    tansu: Tansu, make_target: Any
) -> None:
    target = make_target(tansu.bootstrap, max_request_size=1000)
    await run(target, make_job("sized", {"small": True}))
    producer = target._producer
    assert target._appender is not None
    with pytest.raises(DeadNow, match="MessageSizeTooLargeError"):
        await run(target, make_job("sized", {"blob": "x" * 2000}))
    assert target._producer is producer  # an invalid record keeps the producer
    await run(target, make_job("sized", {"small": 2}))
    assert len(await consume(tansu.bootstrap, "sized", 2, timeout_s=3)) == 2
