"""The fast lane: one worker per owned partition, rows in key + version order.

`FastLane` is the pod's lane: it listens to the lease keeper (a partition acquired,
renewed, lost, released), starts and stops a `fast_worker.PartitionWorker` per owned
partition and routes wake-ups to them. The workers share the lane's parts through a
`fast_context.FastContext` (store, clock, outcome path, group commit, marks); the
rounds live in `fast_worker`, the paging and planning of a pass in `fast_pass`.

When a pod acquires a partition it first judges the rows a previous owner left in
flight (`FastContext.take_over`): at-most-once → DEAD, at-least-once → requeued.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from jobledger.domain.jobs import Job, Lane
from jobledger.reactors.commit import GroupCommitter
from jobledger.reactors.fast_context import FastContext
from jobledger.reactors.fast_worker import PartitionWorker
from jobledger.reactors.outcome import OutcomePath
from jobledger.reactors.waiting import safety_poll_s

if TYPE_CHECKING:
    from jobledger.engine import Engine

logger = logging.getLogger("jobledger.fast_lane")


class FastLane:
    """The pod's fast lane: a worker per owned partition, fed by the lease keeper."""

    def __init__(
        self,
        engine: Engine,
        pod: str,
        outcomes: OutcomePath,
        committer: GroupCommitter,
        *,
        autostart: bool = True,
    ) -> None:
        self.ctx = FastContext(engine, pod, outcomes, committer)
        self.store = engine.store
        self.clock = engine.clock
        self.settings = engine.settings
        self.stats = self.ctx.stats
        self.autostart = autostart
        self.workers: dict[int, PartitionWorker] = {}
        #: set once the pod's change feed is subscribed (Runtime.start); until then no
        #: queue is read. Set from the start for a lane driven without a feed (tests)
        self.subscribed = asyncio.Event()
        self.subscribed.set()

    # --- the lease keeper's listener -----------------------------------------------------
    async def acquired(self, partitions: Sequence[int], until: datetime) -> None:
        """Newly leased `partitions`: judge what their previous owners left in flight
        (one read for all), start their workers, and wake those with PENDING rows (one
        read for all; a worker with nothing to do waits for its wake-up)."""
        fresh: list[int] = []
        for partition in partitions:
            old = self.workers.get(partition)
            if old is not None and not old.stopping:
                old.lease_until = until
            else:
                fresh.append(partition)
        if not fresh:
            return
        await self.ctx.take_over(fresh)
        for partition in fresh:
            worker = PartitionWorker(self.ctx, partition, until)
            self.workers[partition] = worker
            if self.autostart:
                worker.task = asyncio.create_task(worker.run(), name=f"jobledger-fast-{partition}")
        # the workers exist and the feed is subscribed before the read: a wake-up
        # committed meanwhile reaches them
        await self.subscribed.wait()
        try:
            pending = await self.store.queue.pending_partitions(fresh, due_by=None)
        except Exception:
            logger.exception("reading the new partitions' queues failed; waking them all")
            pending = fresh
        self.wake(pending)

    async def renewed(self, partitions: Iterable[int], until: datetime) -> None:
        """Extend the workers' leases, and start a worker for every held partition that
        has none running: a takeover that met a dropped connection (its read or its write
        failed after the take committed), or a worker that stopped on its own clock while
        the store kept the lease. A held partition is served or released, never held
        idle: its lease keeps every other pod away (docs/reliability.md)."""
        start: list[int] = []
        orphans: list[int] = []
        for partition in partitions:
            worker = self.workers.get(partition)
            if worker is not None and not worker.lost and not _ended(worker):
                worker.lease_until = until
                continue
            if worker is None or not worker.lost:
                orphans.append(partition)
            if worker is not None:
                self.workers.pop(partition, None)
                await _joined(worker)
            start.append(partition)
        if orphans:
            logger.warning("partitions %s held without a running worker: starting them", orphans)
        if start:
            await self.acquired(start, until)

    async def lost(self, partition: int) -> None:
        worker = self.workers.pop(partition, None)
        if worker is not None:
            worker.stop(lost=True)  # it may be mid-send: it sends nothing after this

    async def release(self, partition: int) -> None:
        worker = self.workers.pop(partition, None)
        if worker is not None:
            worker.stop()
            await worker.join()

    def busy(self, partition: int) -> bool:
        worker = self.workers.get(partition)
        return worker is not None and worker.busy

    def suspend(self, partitions: Iterable[int]) -> None:
        """No send starts from `partitions` any more: their workers' leases end now, so
        each stops at its next send (`_may_send`) and the next renewal restarts it."""
        for partition in partitions:
            if (worker := self.workers.get(partition)) is not None:
                worker.lease_until = self.clock.now()

    # --- wake-ups ------------------------------------------------------------------------
    def wake(self, partitions: Iterable[int] | None, jobs: Sequence[Job] = ()) -> None:
        """Wake the workers of `partitions` (None: all), handing each the new rows of
        its partition in `jobs` (`Wake.jobs`)."""
        for job in jobs:
            worker = self.workers.get(job.partition)
            if worker is not None and job.lane == Lane.FAST:
                worker.hint(job)
        if partitions is None:
            for worker in self.workers.values():
                worker.wake()
            return
        for partition in partitions:
            found = self.workers.get(partition)
            if found is not None:
                found.wake()

    async def safety_poll(self) -> None:
        """The pod's one safety poll: wake the workers whose partitions have a row due
        (one read for every owned partition). It only covers a wake-up that never came;
        the change feed wakes the workers, their timers cover retries and probes."""
        owned = sorted(p for p, w in self.workers.items() if not w.stopping)
        if owned:
            self.wake(await self.store.queue.pending_partitions(owned, due_by=self.clock.now()))

    async def poll_forever(self) -> None:
        """`safety_poll` every `settings.safety_poll_s` (jittered); a failure is logged."""
        while True:
            await self.clock.sleep(safety_poll_s(self.settings.safety_poll_s))
            try:
                await self.safety_poll()
            except Exception:
                logger.exception("fast lane safety poll failed; trying again next time")

    async def step(self, partition: int) -> int | None:
        """One round of `partition` (tests drive the lane with this, autostart off)."""
        return await self.workers[partition].step()

    async def stop(self) -> None:
        workers = list(self.workers.values())
        for worker in workers:
            worker.stop()
        for worker in workers:
            await worker.join()

    async def take_over(self, partitions: Sequence[int]) -> None:
        """Judge the rows previous owners of `partitions` left in flight."""
        await self.ctx.take_over(partitions)


def _ended(worker: PartitionWorker) -> bool:
    """The worker's task is over although nobody stopped it (it raised)."""
    return worker.task is not None and worker.task.done() and not worker.stopping


async def _joined(worker: PartitionWorker) -> None:
    """Wait for a worker that is over or stopping; an error it ended with is logged."""
    try:
        await worker.join()
    except Exception:
        logger.exception("partition %d: its worker ended with an error", worker.partition)
