"""The memory store's coordination state: partition leases and live workers."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from jobledger.storage.port import LeaseGuard, PartitionLease


class MemoryCoordination:
    """Leases of the hash partitions and the workers' heartbeats, in two dictionaries."""

    def __init__(self) -> None:
        self.leases_: dict[int, PartitionLease] = {}
        self.workers: dict[str, datetime] = {}

    def _holds(self, guard: LeaseGuard, partition: int) -> bool:
        lease = self.leases_.get(partition)
        return bool(
            lease
            and lease.owner == guard.pod
            and lease.lease_until is not None
            and lease.lease_until > guard.now
        )

    async def seed_partitions(self, count: int) -> None:
        for p in range(count):
            self.leases_.setdefault(p, PartitionLease(p, None, None))

    async def heartbeat(self, pod: str, now: datetime) -> None:
        self.workers[pod] = now

    async def remove_worker(self, pod: str) -> None:
        self.workers.pop(pod, None)

    async def live_workers(self, since: datetime) -> list[str]:
        return sorted(p for p, at in self.workers.items() if at > since)

    async def leases(self) -> list[PartitionLease]:
        return [self.leases_[p] for p in sorted(self.leases_)]

    async def take_partition(
        self, partition: int, pod: str, now: datetime, until: datetime
    ) -> bool:
        lease = self.leases_.get(partition)
        if lease is None:
            return False
        free = (
            lease.owner is None
            or lease.owner == pod
            or (lease.lease_until is not None and lease.lease_until <= now)
        )
        if free:
            self.leases_[partition] = PartitionLease(partition, pod, until)
        return free

    async def renew_partitions(
        self, pod: str, partitions: Sequence[int], now: datetime, until: datetime
    ) -> list[int]:
        held = []
        for p in partitions:
            lease = self.leases_.get(p)
            if (
                lease
                and lease.owner == pod
                and lease.lease_until is not None
                and lease.lease_until > now
            ):
                self.leases_[p] = PartitionLease(p, pod, until)
                held.append(p)
        return held

    async def release_partitions(self, pod: str, partitions: Sequence[int]) -> None:
        for p in partitions:
            lease = self.leases_.get(p)
            if lease and lease.owner == pod:
                self.leases_[p] = PartitionLease(p, None, None)
