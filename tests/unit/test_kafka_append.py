"""`Appender.for_producer`: the no-wait path is used only on a producer whose insides
it knows; anything else sends through `AIOKafkaProducer.send`."""

from __future__ import annotations

from types import SimpleNamespace

from jobledger.targets.kafka.append import Appender
from jobledger.targets.kafka.target import _key_hash, partition_of


def producer(**changes: object) -> SimpleNamespace:
    accumulator = SimpleNamespace(
        _batches={},
        _closed=False,
        _exception=None,
        create_builder=lambda: None,
        _append_batch=lambda builder, tp: None,
    )
    fields: dict[str, object] = {
        "_message_accumulator": accumulator,
        "_txn_manager": None,
        "_key_serializer": None,
        "_value_serializer": None,
        "_partitioner": partition_of,
        "_max_request_size": 1000,
        "client": SimpleNamespace(cluster=SimpleNamespace(_partitions={})),
    }
    fields.update(changes)
    return SimpleNamespace(**fields)


async def test_a_known_producer_gets_an_appender() -> None:
    assert Appender.for_producer(producer(), partition_of, _key_hash) is not None


async def test_unknown_insides_take_send() -> None:
    for changes in (
        {"_txn_manager": object()},  # transactions or idempotence
        {"_key_serializer": str.encode},
        {"_partitioner": object()},
        {"_message_accumulator": SimpleNamespace()},  # renamed insides
        {"client": SimpleNamespace()},
    ):
        assert Appender.for_producer(producer(**changes), partition_of, _key_hash) is None


async def test_no_metadata_no_key_or_a_closed_accumulator_take_send() -> None:
    made = producer()
    appender = Appender.for_producer(made, partition_of, _key_hash)
    assert appender is not None
    assert appender.append("unknown", b"k", b"v", []) is None  # no metadata yet
    made.client.cluster._partitions["t"] = {0: object()}
    assert appender.append("t", None, b"v", []) is None  # keyless: aiokafka picks
    made._message_accumulator._closed = True
    assert appender.append("t", b"k", b"v", []) is None  # send raises ProducerClosed
