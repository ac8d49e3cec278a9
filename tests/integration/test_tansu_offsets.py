"""What the test broker (tansu, memory storage) guarantees about offsets, measured.

The chaos harness counted an at-least-once job as lost (`JobSucceeded`, its
record never read) right before its broker-restart fault, where the recorder reads "up
to the end offsets" before the broker is killed. These tests pin what tansu does with
many concurrent producers on one partition (the chaos workers share each Kafka
partition):

* every acknowledged record gets its own offset, and is read back at that offset (no
  offset given twice, no acknowledged record overwritten);
* ListOffsets(latest) is *not* the high watermark: it is one past the first offset of
  the partition's last batch (a batch of 5 at 3..7 reports 4);
* a fetch may not return a partition's last acknowledged records for up to ~5 s (tansu's
  metadata cache retention), unless the partition is written again: a few rounds in a
  thousand with 3 producers (docs/reliability.md, "The test broker's offsets"). The slow test shows the
  property the harness relies on instead (tests/chaos/record.py, `Recorder.quiesced`):
  after one more write (a fence) is acknowledged, every record acknowledged before it is
  read back.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.tansu import Tansu, create_topic, tansu_fixture  # noqa: F401  (fixture `tansu`)

pytestmark = pytest.mark.kafka

TOPIC = "offsets"
PARTITION = 2
TP = TopicPartition(TOPIC, PARTITION)


async def producers(bootstrap: str, n: int) -> list[AIOKafkaProducer]:
    out = [AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0) for _ in range(n)]
    for producer in out:
        await producer.start()
    return out


async def burst(
    producer: AIOKafkaProducer, prefix: str, count: int, acked: dict[int, list[bytes]]
) -> None:
    """`count` records queued back to back (aiokafka batches them), each ack noted."""
    futures = []
    for i in range(count):
        key = f"{prefix}:{i}".encode()
        futures.append((key, await producer.send(TOPIC, key, key=key, partition=PARTITION)))
        if random.random() < 0.3:
            await asyncio.sleep(0)  # let the sender take a batch now and then
    for key, future in futures:
        meta = await future
        assert (meta.topic, meta.partition) == (TOPIC, PARTITION)
        acked.setdefault(meta.offset, []).append(key)


async def read_partition(
    bootstrap: str, want: set[int], timeout_s: float, start: int = 0
) -> dict[int, bytes]:
    """offset -> key of the partition from `start`, until every offset in `want` was
    read or `timeout_s` passed (a fresh consumer)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    got: dict[int, bytes] = {}
    try:
        consumer.assign([TP])
        consumer.seek(TP, start)
        deadline = time.monotonic() + timeout_s
        while not want <= got.keys() and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=100)
            for records in batch.values():
                for r in records:
                    got.setdefault(r.offset, r.key)
    finally:
        await consumer.stop()
    return got


async def end_offset(bootstrap: str) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        end: int = (await consumer.end_offsets([TP]))[TP]
        return end
    finally:
        await consumer.stop()


async def fence(producer: AIOKafkaProducer) -> int:
    meta: Any = await producer.send_and_wait(TOPIC, b"fence", key=b"fence", partition=PARTITION)
    return int(meta.offset)


async def test_concurrent_producers_get_distinct_offsets_and_read_back(tansu: Tansu) -> None:
    await create_topic(tansu.bootstrap, TOPIC, 4)
    clients = await producers(tansu.bootstrap, 8)
    acked: dict[int, list[bytes]] = {}
    try:
        await asyncio.gather(
            *(
                burst(p, f"p{i}t{t}", 60, acked)
                for i, p in enumerate(clients)
                for t in range(3)  # several sends in flight per producer
            )
        )
        after = await fence(clients[0])
    finally:
        for p in clients:
            await p.stop()
    twice = {offset: keys for offset, keys in acked.items() if len(keys) > 1}
    assert not twice, f"offsets acknowledged to two records: {twice}"
    assert sorted(acked) == list(range(8 * 3 * 60)), "acked offsets are not 0..n-1"
    assert after == 8 * 3 * 60
    got = await read_partition(tansu.bootstrap, set(acked), 15)
    wrong = {o: (keys[0], got.get(o)) for o, keys in acked.items() if got.get(o) != keys[0]}
    assert not wrong, f"acknowledged records not at their offset: {list(wrong.items())[:5]}"


async def test_end_offset_is_one_past_the_last_batch_start(tansu: Tansu) -> None:
    """Kafka's ListOffsets(latest) is the high watermark (one past the last record);
    tansu's is one past the *first* record of the last batch."""
    await create_topic(tansu.bootstrap, TOPIC, 4)
    (producer,) = await producers(tansu.bootstrap, 1)
    try:
        for _ in range(3):
            await producer.send_and_wait(TOPIC, b"single", key=b"k", partition=PARTITION)
        assert await end_offset(tansu.bootstrap) == 3  # single-record batches: right
        batch = producer.create_batch()
        for i in range(5):
            assert batch.append(key=b"k", value=str(i).encode(), timestamp=None) is not None
        meta = await (await producer.send_batch(batch, TOPIC, partition=PARTITION))
        assert meta.offset == 3  # the batch holds offsets 3..7
    finally:
        await producer.stop()
    got = await read_partition(tansu.bootstrap, set(range(8)), 10)
    assert sorted(got) == list(range(8))  # all written and readable from offset 0
    assert await end_offset(tansu.bootstrap) == 4  # not 8


@pytest.mark.slow
async def test_a_later_write_makes_every_acked_record_readable(tansu: Tansu) -> None:
    """Rounds of 3 producers writing small batches to one partition at once. A full
    read right after the acks may miss the last records (counted, printed); after one
    more acknowledged write (a fence), every record acknowledged before it is read."""
    await create_topic(tansu.bootstrap, TOPIC, 4)
    clients = await producers(tansu.bootstrap, 4)
    writers, fencer = clients[:3], clients[3]
    acked: dict[int, list[bytes]] = {}
    unreadable_rounds: list[tuple[int, list[int]]] = []
    try:
        for n in range(1000):
            first = len(acked) + n  # the round's first offset (one fence per round)
            await asyncio.gather(
                *(burst(p, f"r{n}p{i}", random.randint(1, 5), acked) for i, p in enumerate(writers))
            )
            round_acked = {offset for offset in acked if offset >= first}
            got = await read_partition(tansu.bootstrap, round_acked, 0.5, first)
            missing = sorted(round_acked - got.keys())
            if missing:
                unreadable_rounds.append((n, missing))
            assert await fence(fencer) > max(acked)
            got = await read_partition(tansu.bootstrap, round_acked, 10, first)
            unread = sorted(round_acked - got.keys())
            assert not unread, f"round {n}: {unread} unread after a later write"
    finally:
        for p in clients:
            await p.stop()
    assert all(len(keys) == 1 for keys in acked.values())
    print(f"rounds whose last acked records a full read missed: {unreadable_rounds}")
