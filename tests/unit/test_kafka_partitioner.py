"""`partition_of`: aiokafka's default partitioner with the key's hash remembered."""

from __future__ import annotations

from aiokafka.partitioner import DefaultPartitioner

from jobledger.targets.kafka.target import partition_of


def test_a_key_lands_where_the_default_partitioner_puts_it() -> None:
    default = DefaultPartitioner()
    for count in (1, 3, 8, 64):
        partitions = list(range(count))
        for n in range(500):
            key = f"DO-{n:06d}".encode()
            expected = default(key, partitions, partitions)
            assert partition_of(key, partitions, partitions) == expected
            assert partition_of(key, partitions, partitions) == expected  # remembered


def test_a_record_without_key_goes_to_an_available_partition() -> None:
    for _ in range(50):
        assert partition_of(None, [0, 1, 2, 3], [2, 3]) in (2, 3)
