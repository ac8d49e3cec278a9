"""The recorder: what really reached the topics, read back from the broker.

It consumes both chaos topics from the start and keeps every record in arrival order,
with the time it was read; a broker restart starts a new generation (tansu keeps topics
in memory, so a restarted broker starts empty and offsets start at 0 again).
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
from tests.tansu import create_topic

logger = logging.getLogger("jobledger.chaos")

TOPICS = (chaos_app.AMO_TOPIC, chaos_app.ALO_TOPIC)
TOPIC_PARTITIONS = 4


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


class Recorder:
    """Consumes both topics from the start, keeping every record in arrival order.

    `new_generation()` after a broker restart: the topics are new, offsets start at 0.
    """

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.records: list[Delivered] = []
        self.generation = 0
        self.next_offset: dict[tuple[str, int], int] = {}
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
        self.generation += 1
        self.next_offset.clear()
        self._running.set()

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
                consumer.seek(tp, self.next_offset.get((tp.topic, tp.partition), 0))
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
            now = time.time()
            for tp, records in batch.items():
                for r in records:
                    key = (tp.topic, tp.partition)
                    if r.offset < self.next_offset.get(key, 0):
                        continue
                    self.next_offset[key] = r.offset + 1
                    headers = {k: v.decode() for k, v in (r.headers or ())}
                    self.records.append(
                        Delivered(
                            tp.topic,
                            tp.partition,
                            r.offset,
                            self.generation,
                            r.key.decode() if r.key is not None else None,
                            headers.get("event_id"),
                            json.loads(r.value) if r.value else None,
                            now,
                        )
                    )

    async def caught_up(self, timeout_s: float) -> bool:
        """Wait until every partition was read up to its end offset (as of each check)."""
        from aiokafka import TopicPartition

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            consumer = self._consumer
            if consumer is not None:
                try:
                    tps = [TopicPartition(t, p) for t in TOPICS for p in range(TOPIC_PARTITIONS)]
                    ends = await asyncio.wait_for(consumer.end_offsets(tps), 5)
                    if all(
                        self.next_offset.get((tp.topic, tp.partition), 0) >= end
                        for tp, end in ends.items()
                    ):
                        return True
                except Exception as exc:
                    logger.info("recorder end offsets: %r", exc)
            await asyncio.sleep(0.2)
        return False

    async def quiesced(self, timeout_s: float, stable_s: float = 1.0) -> bool:
        """With every producer stopped: wait until the topics' end offsets stop moving for
        `stable_s` (requests already on the wire have landed) and the recorder has read up
        to them. A condition, not a delay: False when it did not hold within `timeout_s`."""
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
                self.next_offset.get((tp.topic, tp.partition), 0) >= end for tp, end in ends.items()
            ):
                return True
            await asyncio.sleep(0.1)
        return False


async def create_topics(bootstrap: str) -> None:
    for topic in TOPICS:
        with contextlib.suppress(Exception):  # already there (a producer auto-created it)
            await create_topic(bootstrap, topic, TOPIC_PARTITIONS)
