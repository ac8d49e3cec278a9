"""The recorder: what really reached the topics, read back from the broker.

It consumes both chaos topics from the start and keeps every record in arrival order,
with the time it was read; a broker restart starts a new generation (tansu keeps topics
in memory, so a restarted broker starts empty and offsets start at 0 again). An offset
it jumped over is read again until it turns up, or reported (tests/chaos/offsets.py).

`quiesced()` (before the broker is killed, and after the drain) does not trust the
broker's end offsets: tansu answers ListOffsets(latest) with one past the *first* offset
of the partition's last batch, and a fetch does not return a partition's last records
until a later write (tests/integration/test_tansu_offsets.py). It writes a fence record
to every partition instead and waits until the recorder has read each fence with no
hole below it: every record acknowledged before the fence was sent has a lower offset.
Fence records (key `FENCE_KEY`) take part in the hole tracking but are not kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from tests.chaos import app as chaos_app
from tests.chaos.offsets import MAX_REREADS, PartitionRead
from tests.tansu import create_topic

logger = logging.getLogger("jobledger.chaos")

TOPICS = (chaos_app.AMO_TOPIC, chaos_app.ALO_TOPIC)
TOPIC_PARTITIONS = 4
FENCE_KEY = b"chaos-fence"
FENCE_AGAIN_S = 1.0  # a fence not read by then: write another (it makes the first visible)


@dataclass
class Delivered:
    topic: str
    partition: int
    offset: int
    generation: int  # broker life (a restarted tansu starts empty)
    key: str | None
    event_id: str | None
    value: Any
    seen_at: float = 0.0  # time.time() when the recorder read it


def broker_order(records: list[Delivered]) -> list[Delivered]:
    """By generation, partition and offset: the order the broker appended them (a record
    read on a second read arrives late)."""
    return sorted(records, key=lambda r: (r.generation, r.topic, r.partition, r.offset))


class Recorder:
    """Consumes both topics from the start, keeping every record in arrival order.

    `new_generation()` after a broker restart: the topics are new, offsets start at 0.
    A hole in the offsets read from a partition makes it seek back and read again;
    `gaps()` names the holes it could not fill (each a problem of the run).
    """

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.records: list[Delivered] = []
        self.generation = 0
        self.reads: dict[tuple[str, int], PartitionRead] = {}
        self.lost_holes: list[str] = []  # holes of earlier generations, never read
        self.holes_found = 0  # over every generation, filled or not
        self.fences_written = 0
        self._consumer: Any = None
        self._task: asyncio.Task[None] | None = None
        self._running = asyncio.Event()

    def start(self) -> None:
        self._running.set()
        self._task = asyncio.create_task(self._run(), name="chaos-recorder")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._close()

    async def suspend(self) -> None:
        self._running.clear()
        await self._close()

    def new_generation(self) -> None:
        self.holes_found += sum(read.found for read in self.reads.values())
        self.lost_holes += self.unread_now()
        self.generation += 1
        self.reads.clear()
        self._running.set()

    def read(self, topic: str, partition: int) -> PartitionRead:
        return self.reads.setdefault((topic, partition), PartitionRead())

    def gaps(self) -> list[str]:
        """Offsets the recorder skipped and could not read again (given up, or still
        open), and those of earlier broker generations: each one a record not checked."""
        return self.lost_holes + self.unread_now()

    def unread_now(self) -> list[str]:
        out: list[str] = []
        for (topic, partition), read in sorted(self.reads.items()):
            for offset in sorted([*read.given_up, *read.holes]):
                out.append(
                    f"{topic}/{partition} offset {offset} (generation {self.generation})"
                    f" never read, re-read {read.holes.get(offset, MAX_REREADS)} times"
                )
        return out

    @property
    def holes_filled(self) -> int:
        found = self.holes_found + sum(read.found for read in self.reads.values())
        return found - len(self.gaps())

    def in_broker_order(self) -> list[Delivered]:
        return broker_order(self.records)

    async def _close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                await consumer.stop()

    async def _open(self) -> Any:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            request_timeout_ms=5000,
        )
        await consumer.start()
        try:
            await consumer.topics()
            tps = [
                TopicPartition(t, p)
                for t in TOPICS
                for p in sorted(consumer.partitions_for_topic(t) or ())
            ]
            if len(tps) != len(TOPICS) * TOPIC_PARTITIONS:
                raise RuntimeError(f"topics not ready: {tps}")
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, self.read(tp.topic, tp.partition).position())
        except BaseException:
            with contextlib.suppress(Exception):
                await consumer.stop()
            raise
        return consumer

    async def _run(self) -> None:
        while True:
            await self._running.wait()
            try:
                if self._consumer is None:
                    self._consumer = await self._open()
                batch = await self._consumer.getmany(timeout_ms=200)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # broker hung, gone or restarting: open again
                logger.info("recorder: %r; reopening", exc)
                await self._close()
                await asyncio.sleep(0.5)
                continue
            if not self._running.is_set():
                continue  # suspended meanwhile (a broker restart): these belong to no one
            await self.accept(batch, time.time())

    async def accept(self, batch: dict[Any, list[Any]], now: float) -> None:
        """Keep the new records of a fetched batch; seek back to a hole it left (on the
        same consumer the first time, on a fresh one after that)."""
        reopen = False
        for tp, records in batch.items():
            read = self.read(tp.topic, tp.partition)
            for r in records:
                if read.accept(r.offset) and r.key != FENCE_KEY:
                    self.records.append(self.delivered(tp.topic, tp.partition, r, now))
            if not records:
                continue
            rewind = read.after_batch(max(r.offset for r in records))
            if rewind is None:
                continue
            logger.info("recorder: %s/%s offset %s skipped; reading again", *tp, rewind)
            if read.retried or self._consumer is None:
                reopen = True
            else:
                self._consumer.seek(tp, rewind)
        if reopen:
            await self._close()

    def delivered(self, topic: str, partition: int, r: Any, now: float) -> Delivered:
        headers = {k: v.decode() for k, v in (r.headers or ())}
        return Delivered(
            topic,
            partition,
            r.offset,
            self.generation,
            r.key.decode() if r.key is not None else None,
            headers.get("event_id"),
            json.loads(r.value) if r.value else None,
            now,
        )

    async def caught_up(self, timeout_s: float) -> bool:
        """Wait until every partition was read up to its end offset (as of each check).
        For tests that write one record per batch: tansu's end offset stops at the first
        record of a partition's last batch, so the harness uses `quiesced` instead."""
        from aiokafka import TopicPartition

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            consumer = self._consumer
            if consumer is not None:
                try:
                    tps = [TopicPartition(t, p) for t in TOPICS for p in range(TOPIC_PARTITIONS)]
                    ends = await asyncio.wait_for(consumer.end_offsets(tps), 5)
                    if all(
                        self.read(tp.topic, tp.partition).read_up_to(end)
                        for tp, end in ends.items()
                    ):
                        return True
                except Exception as exc:
                    logger.info("recorder end offsets: %r", exc)
            await asyncio.sleep(0.2)
        return False

    async def settled_by_end_offsets(self, timeout_s: float, stable_s: float = 1.0) -> float | None:
        """v3's quiesce condition, kept as a measurement: the end offsets did not
        move for `stable_s` and the recorder read up to them. Returns the time.time() it
        held (None: not within `timeout_s`); the records of this generation read after
        that moment are what v3 would have lost to the broker's kill."""
        from aiokafka import TopicPartition

        deadline = time.monotonic() + timeout_s
        tps = [TopicPartition(t, p) for t in TOPICS for p in range(TOPIC_PARTITIONS)]
        last: dict[Any, int] | None = None
        since = time.monotonic()
        while time.monotonic() < deadline:
            consumer = self._consumer
            ends: dict[Any, int] | None = None
            if consumer is not None:
                try:
                    ends = dict(await asyncio.wait_for(consumer.end_offsets(tps), 5))
                except Exception as exc:
                    logger.info("recorder end offsets: %r", exc)
            if ends is None or ends != last:
                last, since = ends, time.monotonic()
            elif time.monotonic() - since >= stable_s and all(
                self.read(tp.topic, tp.partition).read_up_to(end) for tp, end in ends.items()
            ):
                return time.time()
            await asyncio.sleep(0.1)
        return None

    def read_past(self, topic: str, partition: int, offset: int) -> bool:
        """The record at `offset` and every offset below it were read."""
        read = self.read(topic, partition)
        return offset in read.seen and not any(hole < offset for hole in read.holes)

    async def quiesced(self, timeout_s: float, idle: Any = None) -> bool:
        """With every producer stopped: wait until `idle()` (if given: the proxy has no
        Produce request unanswered, `LoopbackProxy.produce_idle`), then write a fence
        record to every partition and wait until the recorder has read each fence and
        everything below it; a fence not read within `FENCE_AGAIN_S` gets another one
        after it (a later write makes tansu return the earlier one). A condition, not a delay: False when it did not hold within
        `timeout_s`."""
        from aiokafka import AIOKafkaProducer

        deadline = time.monotonic() + timeout_s
        while idle is not None and not await idle():
            if time.monotonic() > deadline:
                logger.info("quiesce: produce requests still unanswered")
                return False
            await asyncio.sleep(0.05)
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, acks="all", request_timeout_ms=5000
        )
        try:
            await asyncio.wait_for(producer.start(), 10)
            # per partition: the first fence's offset (everything acknowledged before is
            # below it) and when the last fence was written there
            fences: dict[tuple[str, int], tuple[int, float]] = {}
            waiting: list[tuple[str, int]] = []
            while time.monotonic() < deadline:
                waiting = [
                    (t, p)
                    for t in TOPICS
                    for p in range(TOPIC_PARTITIONS)
                    if (t, p) not in fences or not self.read_past(t, p, fences[t, p][0])
                ]
                if not waiting:
                    return True
                for t, p in waiting:
                    if (t, p) in fences and time.monotonic() - fences[t, p][1] < FENCE_AGAIN_S:
                        continue
                    meta = await asyncio.wait_for(
                        producer.send_and_wait(t, b"{}", key=FENCE_KEY, partition=p), 10
                    )
                    self.fences_written += 1
                    first = fences[t, p][0] if (t, p) in fences else meta.offset
                    fences[t, p] = (first, time.monotonic())
                await asyncio.sleep(0.05)
            logger.info("quiesce: fences not read: %s", waiting)
            return False
        except Exception as exc:
            logger.info("quiesce: %r", exc)
            return False
        finally:
            with contextlib.suppress(Exception):
                await producer.stop()


async def create_topics(bootstrap: str) -> None:
    for topic in TOPICS:
        with contextlib.suppress(Exception):  # already there (a producer auto-created it)
            await create_topic(bootstrap, topic, TOPIC_PARTITIONS)
