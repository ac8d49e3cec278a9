"""The recorder reads a skipped offset again, and fails the run when it cannot.

In a long run the recorder never read one offset (chaos.amo/1 @1777) and the job sent
there counted as lost. These tests hand the recorder a batch with a hole in it, as that
consumer returned, against a real tansu broker.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

from tests.chaos.app import ALO_TOPIC, AMO_TOPIC
from tests.chaos.checks import check_offsets
from tests.chaos.offsets import MAX_REREADS, PartitionRead
from tests.chaos.record import Recorder, create_topics
from tests.chaos.summary import Summary
from tests.tansu import Tansu, consume, tansu_fixture  # noqa: F401  (fixture `tansu`)

pytestmark = pytest.mark.kafka


def test_a_hole_is_read_again_then_given_up() -> None:
    read = PartitionRead()
    assert [read.accept(o) for o in (0, 1, 3, 3)] == [True, True, True, False]
    assert read.after_batch(3) == 2 and not read.retried  # seek back, same consumer
    for n in range(1, MAX_REREADS + 1):
        read.accept(3)  # a re-read went past offset 2 without returning it
        rewind = read.after_batch(3)
        assert (rewind, read.retried) == ((2, True) if n < MAX_REREADS else (None, False))
    assert read.given_up == [2] and read.read_up_to(4)
    read.accept(2)  # it turned up after all
    assert read.given_up == [] and read.found == 1


async def produce(bootstrap: str, count: int) -> list[Any]:
    from aiokafka import AIOKafkaProducer

    await create_topics(bootstrap)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    await producer.start()
    try:
        for n in range(count):
            await producer.send_and_wait(AMO_TOPIC, b"{}", key=b"k%d" % n, partition=1)
    finally:
        await producer.stop()
    records = await consume(bootstrap, AMO_TOPIC, count)
    assert [r.offset for r in records] == list(range(count))
    return records


async def test_a_skipped_offset_is_read_again(tansu: Tansu) -> None:
    from aiokafka import TopicPartition

    records = await produce(tansu.bootstrap, 10)
    recorder = Recorder(tansu.bootstrap)
    # what the long run's consumer returned: every record but offset 5
    batch = {TopicPartition(AMO_TOPIC, 1): [r for r in records if r.offset != 5]}
    await recorder.accept(batch, time.time())
    assert len(recorder.gaps()) == 1
    recorder.start()
    try:
        assert await recorder.caught_up(10)
    finally:
        await recorder.stop()
    assert [r.offset for r in recorder.in_broker_order()] == list(range(10))
    summary = Summary("test")
    check_offsets(summary, recorder)
    assert (summary.offsets_reread, summary.offsets_unread, summary.problems) == (1, 0, [])


async def test_an_offset_never_read_fails_the_run(tansu: Tansu) -> None:
    from aiokafka import TopicPartition

    records = await produce(tansu.bootstrap, 3)
    recorder = Recorder(tansu.bootstrap)
    recorder.start()
    try:
        assert await recorder.caught_up(10)
        # a batch on the running consumer that jumps over offsets 3 and 4, which the
        # broker does not have: the seek back cannot find them
        ghost = dataclasses.replace(records[-1], offset=5)
        await recorder.accept({TopicPartition(AMO_TOPIC, 1): [ghost]}, time.time())
        assert not await recorder.caught_up(2)
    finally:
        await recorder.stop()
    summary = Summary("test")
    check_offsets(summary, recorder)
    assert summary.offsets_unread == 2 and not summary.ok
    assert "chaos.amo/1 offset 3 (generation 0) never read" in summary.problems[0]


async def test_quiesced_does_not_trust_the_end_offsets(tansu: Tansu) -> None:
    """A batch of 5 at offsets 0..4: tansu's end offset is 1, so a recorder
    that read offset 0 is "caught up" by the end offsets. `quiesced` waits for fence
    records written after the batch instead, and the batch is read whole (the fences are
    not kept as records)."""
    from aiokafka import AIOKafkaProducer, TopicPartition

    await create_topics(tansu.bootstrap)
    producer = AIOKafkaProducer(bootstrap_servers=tansu.bootstrap, acks="all")
    await producer.start()
    try:
        batch = producer.create_batch()
        for n in range(5):
            batch.append(key=b"k%d" % n, value=b"{}", timestamp=None)
        await (await producer.send_batch(batch, ALO_TOPIC, partition=2))
    finally:
        await producer.stop()
    (first,) = [r for r in await consume(tansu.bootstrap, ALO_TOPIC, 5) if r.offset == 0]
    recorder = Recorder(tansu.bootstrap)
    await recorder.accept({TopicPartition(ALO_TOPIC, 2): [first]}, time.time())
    recorder._consumer = await recorder._open()  # the end-offset condition, not started
    try:
        assert await recorder.caught_up(5)  # fooled: offsets 1..4 not read
    finally:
        await recorder._close()
    recorder.start()
    try:
        assert await recorder.quiesced(10)
    finally:
        await recorder.stop()
    assert [(r.partition, r.offset) for r in recorder.in_broker_order()] == [
        (2, n) for n in range(5)
    ]
    assert recorder.fences_written >= 8  # one per partition of both topics


async def test_quiesced_fails_while_produce_requests_are_unanswered(tansu: Tansu) -> None:
    async def never_idle() -> bool:
        return False

    recorder = Recorder(tansu.bootstrap)
    assert not await recorder.quiesced(0.5, never_idle)
    assert recorder.fences_written == 0
