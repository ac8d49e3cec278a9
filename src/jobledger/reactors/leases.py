"""Partition leases: which pod runs which fast-lane partition (reference
partition_lease.service.ts, §6 "Partition lease heartbeat", §9).

Every `heartbeat_s` a pod writes its liveness row, renews the leases it holds
(`partition_lease_s`) and reads the lease rows, in one `store.coordination.beat` (one statement on
PostgreSQL), and moves toward its fair share (`domain.policies.share_target`):
ceil(P / live pods), or max(floor, 1) while another live pod is below the floor. Takes
are atomic (`store.coordination.take_partitions`, one statement for the whole share on PostgreSQL),
so two pods never hold one partition; a busy partition (a batch in progress) is never released. Leases and liveness rows are
coordination state: plain compare-and-set rows, no events.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Protocol

from jobledger.config.settings import Settings
from jobledger.core.clock import Clock
from jobledger.domain.policies import share_target
from jobledger.observability.observe import Observer
from jobledger.reactors.waiting import wait_for
from jobledger.storage.port import Beat, Store

logger = logging.getLogger("jobledger.leases")


def make_pod_id() -> str:
    """hostname:pid:uuid8 (reference partition_lease.service.ts:11)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class PartitionListener(Protocol):
    """The fast lane, as the lease keeper sees it."""

    async def acquired(self, partitions: Sequence[int], until: datetime) -> None: ...
    async def renewed(self, partitions: Iterable[int], until: datetime) -> None: ...
    async def lost(self, partition: int) -> None: ...
    async def release(self, partition: int) -> None: ...
    def busy(self, partition: int) -> bool: ...


class PartitionLeases:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        settings: Settings,
        pod: str,
        listener: PartitionListener,
        observers: Observer,
    ) -> None:
        self.store = store
        self.clock = clock
        self.settings = settings
        self.pod = pod
        self.listener = listener
        self.observers = observers
        self.owned: dict[int, datetime] = {}
        self._rng = random.Random(pod)
        self._stop = asyncio.Event()

    @property
    def partitions(self) -> int:
        return self.settings.partitions

    async def start(self) -> None:
        """Seed the lease rows (idempotent, race-safe in the store) and take a share.

        A first beat that fails once the store answered the seeding (a backend terminated
        or a restart under way) does not fail the pod's start: the heartbeat loop beats
        again (every step of a beat is safe to repeat), as after any beat that failed."""
        await self.store.coordination.seed_partitions(self.partitions)
        try:
            await self.tick()
        except Exception:
            self.observers.store_error("heartbeat")
            logger.exception("the first partition lease heartbeat failed; retrying next beat")

    async def run(self) -> None:
        """The heartbeat loop; ends when `stop()` is called."""
        while not self._stop.is_set():
            await wait_for(self._stop, self.clock, self.settings.heartbeat_s)
            if self._stop.is_set():
                break
            try:
                await self.tick()
            except Exception:
                self.observers.store_error("heartbeat")
                logger.exception("partition lease heartbeat failed; retrying next beat")

    def stop(self) -> None:
        self._stop.set()

    async def tick(self) -> None:
        """One heartbeat (one `store.coordination.beat`: liveness, renewals, the live pods and the
        lease rows), then rebalance toward the fair share."""
        now = self.clock.now()
        until = now + timedelta(seconds=self.settings.partition_lease_s)
        since = now - timedelta(seconds=self.settings.worker_live_s)
        beat = await self.store.coordination.beat(self.pod, now, sorted(self.owned), until, since)
        await self._renewed(beat.held, until)
        await self._rebalance(beat, now, until)
        self.observers.partitions_owned(self.pod, len(self.owned))

    async def _renewed(self, held_list: list[int], until: datetime) -> None:
        if not self.owned:
            return
        held = set(held_list)
        for partition in sorted(set(self.owned) - held):
            logger.warning("partition %d lease lost by %s", partition, self.pod)
            self.owned.pop(partition, None)
            await self.listener.lost(partition)
        for partition in held:
            self.owned[partition] = until
        if held:
            await self.listener.renewed(sorted(held), until)

    async def _rebalance(self, beat: Beat, now: datetime, until: datetime) -> None:
        live = set(beat.live)
        live.add(self.pod)
        counts = dict.fromkeys(live, 0)
        free: list[int] = []
        adopt: list[int] = []  # ours in the store, unknown here: a take whose answer was lost
        for lease in beat.leases:
            expired = lease.lease_until is None or lease.lease_until <= now
            if lease.owner == self.pod and not expired and lease.partition not in self.owned:
                adopt.append(lease.partition)
            elif lease.owner is None or expired:
                if lease.partition not in self.owned:
                    free.append(lease.partition)
            elif lease.owner in counts:
                counts[lease.owner] += 1
        mine = len(self.owned)
        others = [count for pod, count in counts.items() if pod != self.pod]
        target = share_target(len(live), others, mine, self.partitions)
        if mine < target:
            self._rng.shuffle(free)
            free = adopt + free
            taken: list[int] = []
            try:
                while free and len(self.owned) < target:
                    ask, free = free[: target - len(self.owned)], free[target - len(self.owned) :]
                    for partition in await self.store.coordination.take_partitions(
                        ask, self.pod, now, until
                    ):
                        self.owned[partition] = until
                        taken.append(partition)
            except Exception:  # a slice that failed does not hide the slices taken before it
                logger.exception("taking partitions failed; the next beat tries again")
            if taken:
                await self.listener.acquired(sorted(taken), until)
        elif mine > target:
            for partition in sorted(self.owned, reverse=True):
                if len(self.owned) <= target:
                    break
                if self.listener.busy(partition):
                    continue  # never release a partition with a batch in progress
                await self.listener.release(partition)
                await self.store.coordination.release_partitions(self.pod, [partition])
                self.owned.pop(partition, None)
        unwanted = [partition for partition in adopt if partition not in self.owned]
        if unwanted:  # beyond the share: free them now rather than when they expire
            await self.store.coordination.release_partitions(self.pod, unwanted)

    async def release_all(self) -> None:
        """Clean shutdown: stop every partition, release the leases, drop liveness.

        The release names every partition, not only those this pod knows it holds: a
        take whose answer never arrived (cancelled by the stop) may have committed, and
        the store releases only rows this pod owns."""
        for partition in sorted(self.owned):
            await self.listener.release(partition)
        try:
            await self.store.coordination.release_partitions(self.pod, range(self.partitions))
            self.owned.clear()
        finally:  # the liveness row goes even when the release failed (its leases expire)
            await self.store.coordination.remove_worker(self.pod)
        self.observers.partitions_owned(self.pod, 0)
