"""The memory store's coordination rows: partition leases and live workers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from jobledger.storage.memory.tables import MemoryTables
from jobledger.storage.port import Coordination, PartitionLease


class MemoryCoordination(Coordination):
    """Leases of the hash partitions and the workers' heartbeats, in two dictionaries."""

    def __init__(self, tables: MemoryTables) -> None:
        self.tables = tables

    async def seed_partitions(self, count: int) -> None:
        for p in range(count):
            self.tables.leases.setdefault(p, PartitionLease(p, None, None))

    async def heartbeat(
        self, pod: str, now: datetime, paused: Mapping[str, datetime] | None = None
    ) -> None:
        self.tables.workers[pod] = now
        if paused is None:
            self.tables.worker_pauses.pop(pod, None)
        else:
            self.tables.worker_pauses[pod] = dict(paused)

    async def live_pauses(self, since: datetime) -> dict[str, dict[str, datetime]]:
        pauses = self.tables.worker_pauses
        return {
            pod: dict(pauses[pod])
            for pod, at in sorted(self.tables.workers.items())
            if at > since and pod in pauses
        }

    async def remove_worker(self, pod: str) -> None:
        self.tables.workers.pop(pod, None)
        self.tables.worker_pauses.pop(pod, None)

    async def live_workers(self, since: datetime) -> list[str]:
        return sorted(p for p, at in self.tables.workers.items() if at > since)

    async def leases(self) -> list[PartitionLease]:
        leases = self.tables.leases
        return [leases[p] for p in sorted(leases)]

    async def take_partition(
        self, partition: int, pod: str, now: datetime, until: datetime
    ) -> bool:
        lease = self.tables.leases.get(partition)
        if lease is None:
            return False
        free = (
            lease.owner is None
            or lease.owner == pod
            or (lease.lease_until is not None and lease.lease_until <= now)
        )
        if free:
            self.tables.leases[partition] = PartitionLease(partition, pod, until)
        return free

    async def renew_partitions(
        self, pod: str, partitions: Sequence[int], now: datetime, until: datetime
    ) -> list[int]:
        leases = self.tables.leases
        held = []
        for p in partitions:
            lease = leases.get(p)
            if (
                lease
                and lease.owner == pod
                and lease.lease_until is not None
                and lease.lease_until > now
            ):
                leases[p] = PartitionLease(p, pod, until)
                held.append(p)
        return held

    async def release_partitions(self, pod: str, partitions: Sequence[int]) -> None:
        leases = self.tables.leases
        for p in partitions:
            lease = leases.get(p)
            if lease and lease.owner == pod:
                leases[p] = PartitionLease(p, None, None)
