"""Queue a record in aiokafka's accumulator without `AIOKafkaProducer.send`'s coroutine.

`send` is a coroutine: it waits for the topic's metadata, checks the record's size,
picks the partition (building two sets and two lists of the topic's partitions per
record) and appends the record to the partition's open batch, waiting for room when
that batch is full. On a warm producer none of that waits, and it was half of the Kafka
target's own cost per record. `Appender.append` does that common case as a plain call
and returns the delivery future, or None as soon as any step would wait or decide
something out of the ordinary — unknown topic metadata, a record near the size limit, a
keyless record, a full batch, a closed or failed accumulator. The caller then takes
`send` itself, under its bound, and gets exactly aiokafka's behaviour and errors.

What it reaches into (checked once per producer by `Appender.for_producer`, which
returns None on an aiokafka whose insides differ, so the target falls back to `send`):
`client.cluster._partitions` (topic → partition → metadata; a metadata update replaces
a topic's dict, so a route cached on that dict's identity is never stale),
`_message_accumulator` (`_batches`, `_closed`, `_exception`, `create_builder`,
`_append_batch`, `MessageBatch.append`), `_max_request_size`, `_partitioner`,
`_txn_manager` (must be None: no transactions, no idempotence), and no key or value
serializer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.structs import TopicPartition

_estimate_size: Callable[..., int] = DefaultRecordBatchBuilder.estimate_size_in_bytes


class Appender:
    """The no-wait path of one producer's `send` (see the module docstring)."""

    __slots__ = (
        "_accumulator",
        "_batches",
        "_create_future",
        "_hash",
        "_limit",
        "_partitions",
        "_routes",
        "producer",
    )

    def __init__(
        self,
        producer: Any,
        key_hash: Callable[[bytes], int],
        create_future: Callable[[], asyncio.Future[Any]],
    ) -> None:
        self.producer = producer
        self._accumulator = producer._message_accumulator
        self._batches: dict[TopicPartition, Any] = self._accumulator._batches
        self._partitions: dict[str, dict[int, Any]] = producer.client.cluster._partitions
        self._limit: int = producer._max_request_size
        self._hash = key_hash
        self._create_future = create_future
        # topic → (its partition metadata dict, the TopicPartition of each index)
        self._routes: dict[str, tuple[dict[int, Any], list[TopicPartition]]] = {}

    @classmethod
    def for_producer(
        cls, producer: Any, partitioner: Any, key_hash: Callable[[bytes], int]
    ) -> Appender | None:
        """An appender for `producer`, or None when its insides are not the ones this
        module knows (then every record takes `send`)."""
        try:
            accumulator = producer._message_accumulator
            usable = (
                producer._txn_manager is None
                and producer._key_serializer is None
                and producer._value_serializer is None
                and producer._partitioner is partitioner
                and isinstance(producer._max_request_size, int)
                and isinstance(producer.client.cluster._partitions, dict)
                and isinstance(accumulator._batches, dict)
                and hasattr(accumulator, "_closed")
                and hasattr(accumulator, "_exception")
                and callable(accumulator.create_builder)
                and callable(accumulator._append_batch)
            )
        except AttributeError:
            return None
        if not usable:
            return None
        return cls(producer, key_hash, asyncio.get_running_loop().create_future)

    def append(
        self, topic: str, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]]
    ) -> asyncio.Future[Any] | None:
        """The record's delivery future, or None: take `producer.send` instead."""
        accumulator = self._accumulator
        if key is None or accumulator._closed or accumulator._exception is not None:
            return None
        # metadata: the cluster's current partitions of the topic (a new dict per update)
        partitions = self._partitions.get(topic)
        if not partitions:
            return None
        route = self._routes.get(topic)
        if route is None or route[0] is not partitions:
            # `send`'s partitioner input: list(set(partition ids)); the key's index in it
            route = (partitions, [TopicPartition(topic, p) for p in list(set(partitions))])
            self._routes[topic] = route
        if _estimate_size(key, value, headers) > self._limit:
            return None  # `send` raises MessageSizeTooLargeError
        tps = route[1]
        tp = tps[self._hash(key) % len(tps)]
        pending = self._batches.get(tp)
        if pending:
            batch = pending[-1]
        else:
            batch = accumulator._append_batch(accumulator.create_builder(), tp)
        future: asyncio.Future[Any] | None = batch.append(
            key, value, None, _create_future=self._create_future, headers=headers
        )
        return future  # None: the batch is full, `send` waits for room
