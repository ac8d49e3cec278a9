"""The fast lane: one worker per owned partition, rows in key + version order
(reference fast_lane.worker.ts, §5, §9).

`FastLane` is the pod's lane: it listens to the lease keeper (a partition acquired,
renewed, lost, released), starts and stops a `fast_worker.PartitionWorker` per owned
partition, routes wake-ups to them, and writes the in-flight marks (`job_commands.dispatch`).
The rounds themselves live in `fast_worker`, the paging and planning of a pass in
`fast_pass`.

When a pod acquires a partition it first judges the rows a previous owner left in
flight (`job_outcomes.take_over`): at-most-once → DEAD, at-least-once → requeued.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from jobledger.core.ids import new_token
from jobledger.domain import job_commands, job_outcomes
from jobledger.domain.events import SYSTEM
from jobledger.domain.job_outcomes import Outcome
from jobledger.domain.jobs import Change, Job, Lane, Stamp
from jobledger.domain.lanes import TargetView
from jobledger.reactors.commit import GroupCommitter
from jobledger.reactors.fast_worker import PartitionWorker
from jobledger.reactors.outcome import OutcomePath
from jobledger.reactors.waiting import safety_poll_s
from jobledger.storage.port import LeaseGuard

if TYPE_CHECKING:
    from jobledger.engine import Engine

logger = logging.getLogger("jobledger.fast_lane")

#: page reads of the lane's workers at once: the rest wait, so that the group commit
#: (and the lease heartbeat) find a pooled connection instead of queueing behind 64 reads
PAGE_READS_AT_ONCE = 4


@dataclass(slots=True)
class LaneStats:
    """Counters the tests and benches read."""

    pages: list[int] = field(default_factory=list)  # size of each page read (last 1000)
    rounds: list[int] = field(default_factory=list)  # rows sent per round (last 1000)
    sent: int = 0
    marks_refused: int = 0

    def page(self, size: int) -> None:
        self.pages.append(size)
        del self.pages[:-1000]

    def round(self, size: int) -> None:
        self.rounds.append(size)
        del self.rounds[:-1000]
        self.sent += size


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
        self.engine = engine
        self.store = engine.store
        self.clock = engine.clock
        self.settings = engine.settings
        self.pod = pod
        self.outcomes = outcomes
        self.pauses = outcomes.pauses
        self.committer = committer
        self.autostart = autostart
        self.workers: dict[int, PartitionWorker] = {}
        self.stats = LaneStats()
        self.reads = asyncio.Semaphore(PAGE_READS_AT_ONCE)
        #: set once the pod's change feed is subscribed (Runtime.start); until then no
        #: queue is read. Set from the start for a lane driven without a feed (tests)
        self.subscribed = asyncio.Event()
        self.subscribed.set()

    def view(self, name: str) -> TargetView | None:
        target = self.engine.targets.find(name)
        if target is None or target.lane != Lane.FAST:
            return None
        return TargetView(
            target.delivery_mode,
            paused=self.pauses.is_paused(name),
            probe_due=self.pauses.probe_due(name),
            exclusive=target.exclusive,
        )

    def mark(self, job: Job) -> Change:
        stamp = Stamp(self.clock.now(), SYSTEM, job.trace_id)
        return job_commands.dispatch(job, token=new_token(), pod=self.pod, stamp=stamp)

    def unmark(self, job: Job, cause: str) -> Change:
        """Release the mark of a row that was marked and then not sent."""
        logger.info("partition %d: job %s marked, not sent (%s)", job.partition, job.id, cause)
        return job_commands.unmark(job, Stamp(self.clock.now(), SYSTEM, job.trace_id), cause)

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
        await self.take_over(fresh)
        for partition in fresh:
            worker = PartitionWorker(self, partition, until)
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
        idle: its lease keeps every other pod away (docs/reliability.md, issue 18)."""
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

    # --- takeover --------------------------------------------------------------------------
    async def take_over(self, partitions: Sequence[int]) -> None:
        """Judge the rows previous owners of `partitions` left in flight (reference §9)."""
        rows = await self.store.queue.inflight_in(partitions)
        decided: list[tuple[Job, Outcome]] = []
        for job in rows:
            target = self.engine.targets.find(job.target)
            if target is None:
                logger.warning(
                    "in-flight job %s: target %s is not registered here", job.id, job.target
                )
                continue
            stamp = Stamp(self.clock.now(), SYSTEM, job.trace_id)
            decided.append((job, job_outcomes.take_over(job, target.delivery_mode, stamp)))
        if not decided:
            return
        flags = await self.store.writes.apply(
            [o.change for _, o in decided], guard=LeaseGuard(self.pod, self.clock.now())
        )
        for (job, outcome), ok in zip(decided, flags, strict=True):
            if not ok:
                continue
            self.outcomes.log_run(job, outcome.label, 0.0, job.attempts, job.last_error)
            if outcome.dead:
                self.outcomes.dead(
                    job, "in flight when its partition was taken over", job.last_error
                )


def _ended(worker: PartitionWorker) -> bool:
    """The worker's task is over although nobody stopped it (it raised)."""
    return worker.task is not None and worker.task.done() and not worker.stopping


async def _joined(worker: PartitionWorker) -> None:
    """Wait for a worker that is over or stopping; an error it ended with is logged."""
    try:
        await worker.join()
    except Exception:
        logger.exception("partition %d: its worker ended with an error", worker.partition)
