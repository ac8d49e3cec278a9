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
serializer. `MessageBatch.append` and the `BatchBuilder.append` under it (two Python
frames per record) are done inline too — the record builder's `append`, the builder's
`_relative_offset` and `close`, the batch's `_msg_futures` — once the producer's first
batch showed those classes and fields (`_appendable`); else through `MessageBatch.append`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiokafka.producer.message_accumulator import BatchBuilder, MessageBatch
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.structs import TopicPartition

_estimate_size: Callable[..., int] = DefaultRecordBatchBuilder.estimate_size_in_bytes


class Appender:
    """The no-wait path of one producer's `send` (see the module docstring)."""

    __slots__ = (
        "_accumulator",
        "_batches",
        "_create_future",
        "_direct",
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
        # whether batches are appended to inline (`_appendable`): known at the first one
        self._direct: bool | None = None
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
        direct = self._direct
        if direct is None:
            direct = self._direct = _appendable(batch)
        if not direct:
            future: asyncio.Future[Any] | None = batch.append(
                key, value, None, _create_future=self._create_future, headers=headers
            )
            return future  # None: the batch is full, `send` waits for room
        # `MessageBatch.append` → `BatchBuilder.append` → the record builder, inline
        builder = batch._builder
        if builder._closed:
            return None
        metadata = builder._builder.append(builder._relative_offset, None, key, value, headers)
        if metadata is None:  # the batch is full: closed, `send` waits for room
            builder.close()
            return None
        builder._relative_offset += 1
        future = self._create_future()
        batch._msg_futures.append((future, metadata))
        return future


def _appendable(batch: Any) -> bool:
    """Whether `batch` is the `MessageBatch` (of a `BatchBuilder` without serializers)
    whose `append` `Appender.append` does inline; checked on a producer's first batch."""
    try:
        builder = batch._builder
        return (
            type(batch) is MessageBatch
            and type(builder) is BatchBuilder
            and isinstance(batch._msg_futures, list)
            and isinstance(builder._closed, bool)
            and isinstance(builder._relative_offset, int)
            and builder._key_serializer is None
            and builder._value_serializer is None
            and callable(builder.close)
            and callable(builder._builder.append)
        )
    except AttributeError:
        return False
