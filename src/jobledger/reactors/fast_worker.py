"""One partition worker of the fast lane: its loop over the states of `fast_states`.

    IDLE ──woken──▶ READING ──a plan with rows──▶ IN_ROUND ──written──▶ READING
    READING ──nothing left to send──▶ IDLE
    IDLE ──one row handed over by the wake-up──▶ IN_ROUND
    IDLE, READING, IN_ROUND ──the pass failed──▶ RECOVERING ──written──▶ READING
    work ──stop()──▶ STOPPING ──▶ STOPPED       work, STOPPING ──lease lost──▶ LOST

`run()` waits for a wake-up or a timer (IDLE), runs a pass over the partition's
PENDING rows until nothing is left to send (`_pass`: rounds of `fast_round.Rounds`,
READING ⇄ IN_ROUND), and again, until it is stopped or its lease is lost. A round that
fails sends the worker RECOVERING: it backs off, writes what the round had decided and
judges the rows of its partition left in flight, then reads again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime

from jobledger.domain.jobs import Job
from jobledger.reactors.fast_context import FastContext
from jobledger.reactors.fast_pass import PartitionPass
from jobledger.reactors.fast_round import Rounds
from jobledger.reactors.fast_states import (
    IDLE,
    LOST,
    RECOVERING,
    STOPPED,
    STOPPING,
    WorkerState,
    WorkerStatus,
)
from jobledger.reactors.waiting import wait_for

logger = logging.getLogger("jobledger.fast_lane")


class PartitionWorker:
    """Runs one owned partition. `step()` is one round; `run()` loops over rounds."""

    def __init__(self, ctx: FastContext, partition: int, lease_until: datetime) -> None:
        self.ctx = ctx
        self.partition = partition
        self.status = WorkerStatus(
            partition, lease_until, ctx.settings.partition_lease_s, ctx.clock, ctx.pod
        )
        #: a wake-up; unset at first: the lane wakes a new worker whose partition has rows
        self.event = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.pass_ = PartitionPass(ctx, partition)
        self.rounds = Rounds(ctx, self.status, self.pass_, partition)
        self._handed: list[Job] = []  # rows a wake-up handed over while IDLE

    # --- what the lane sees and asks -----------------------------------------------------
    @property
    def state(self) -> WorkerState:
        return self.status.state

    @property
    def lease_until(self) -> datetime:
        return self.status.lease_until

    @lease_until.setter
    def lease_until(self, until: datetime) -> None:
        self.status.lease_until = until

    @property
    def busy(self) -> bool:
        """A round is under way, or its next row is marked: the lease keeper keeps it."""
        return self.state is WorkerState.IN_ROUND or self.rounds.carried is not None

    @property
    def idle(self) -> bool:
        return self.state is IDLE

    @property
    def lost(self) -> bool:
        return self.state is LOST

    @property
    def stopping(self) -> bool:
        """Stopping, stopped or lost: the worker takes no new work."""
        return self.status.ending

    def wake(self) -> None:
        self.event.set()

    def hint(self, job: Job) -> None:
        """A row a wake-up handed over (`Wake.jobs`); kept only while the worker waits."""
        if self.state is IDLE:
            self._handed.append(job)

    def stop(self, *, lost: bool = False) -> None:
        """Stop after the round under way; `lost`: the lease is gone, send nothing more."""
        if lost and self.state is not STOPPED:
            self.status.enter(LOST)
        elif not self.status.ending:
            self.status.enter(STOPPING)
        self.event.set()

    async def join(self) -> None:
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def step(self) -> int | None:
        """One round (tests drive the worker with this): the rows it sent, or None once
        the pass found nothing more to send."""
        return await self.rounds.step()

    # --- the loop ------------------------------------------------------------------------
    async def run(self) -> None:
        while await self._woken():
            try:
                if self.status.state is RECOVERING:
                    await self._recover()
                if await self._pass():
                    self.event.set()  # a pass that sent rows is followed by another
            except Exception as exc:
                await self._fail(exc)
        await self._end()

    async def _woken(self) -> bool:
        """Wait (IDLE) for a wake-up or a timer; False once the worker is to end: lost,
        or stopping with no marked row left to send. A recovering worker does not wait."""
        status = self.status
        if status.state is STOPPING:
            return self.rounds.carried is not None
        if status.ending:
            return False
        if status.state is not RECOVERING:
            status.enter(IDLE)
            await wait_for(self.event, self.ctx.clock, self._idle_timeout())
        self.event.clear()
        return not status.ending

    async def _pass(self) -> int:
        """Rounds until the pass over the partition's rows finds nothing more to send
        (READING ⇄ IN_ROUND); the rows sent. A row the wake-up handed over goes first."""
        handed, self._handed = self._handed, []
        sent = await self.rounds.handed_over(handed) if handed else 0
        while (n := await self.rounds.step()) is not None:
            sent += n
        return sent

    async def _fail(self, exc: Exception) -> None:
        """A round failed (a dropped connection, a restarting database): give it up,
        keeping what it decided for `_recover`, and back off (RECOVERING)."""
        self.ctx.observers.store_error("fast_round")
        logger.error("partition %d: round failed; backing off", self.partition, exc_info=exc)
        self.rounds.give_up()
        self.status.enter(RECOVERING)
        await self.ctx.clock.sleep(1.0)

    async def _recover(self) -> None:
        """After a failed round: write the outcomes it had decided — their compare-and-set
        makes the retry safe — and the releases of rows it marked and did not send, then
        judge any row of this partition still marked in flight, as a takeover would.
        Without this a mark whose outcome write failed would hold its key until the lease
        moved."""
        ctx, unwritten = self.ctx, self.rounds.unwritten
        if unwritten.ran:
            ran = unwritten.ran
            flags = await ctx.store.writes.apply([item.outcome.change for item in ran])
            unwritten.ran = []
            await ctx.outcomes.settle(ran, flags, ctx.pod)
        if unwritten.releases:  # compare-and-set: a release another writer beat is refused
            await ctx.store.writes.apply(unwritten.releases)
            unwritten.releases = []
        await ctx.take_over([self.partition])

    async def _end(self) -> None:
        """Release a marked row the worker will not send; a stopping worker is then
        STOPPED, a lost one stays LOST."""
        try:
            await self.rounds.release_carried("partition lost")
        finally:
            if self.status.state is STOPPING:
                self.status.enter(STOPPED)

    def _idle_timeout(self) -> float | None:
        """Until the worker's next timer (a held retry, a paused target's probe); None
        when it has none. The pod's one safety poll (`FastLane.safety_poll`) covers a
        wake-up that never came."""
        now = self.ctx.clock.now()
        waits: list[float] = []
        if self.pass_.wake_at is not None:
            waits.append((self.pass_.wake_at - now).total_seconds())
        probe = self.ctx.pauses.next_probe(self.pass_.paused_seen)
        if probe is not None:
            waits.append((probe - now).total_seconds())
        return max(min(waits), 0.0) if waits else None
