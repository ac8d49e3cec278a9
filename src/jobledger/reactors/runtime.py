"""The worker runtime of one pod: leases, both lanes, the wake path, extra reactors.

    runtime = Runtime(engine, reactors=[schedule_ticker])
    await runtime.run_forever()          # until SIGTERM / SIGINT, then a clean stop

`settings.workers` False (JOBS_WORKERS=off) makes an enqueue-only pod: no lane and no
reactor starts. The wake path is one task reading `store.feed()`: a `Wake` naming
partitions sets the events of exactly those partition workers this pod owns, a wake
for the long lane (or for anything) sets the long lane's; nothing sleeps in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from jobledger.domain.jobs import Lane
from jobledger.reactors import gc_freeze
from jobledger.reactors.commit import GroupCommitter
from jobledger.reactors.fast_lane import FastLane
from jobledger.reactors.leases import PartitionLeases, make_pod_id
from jobledger.reactors.long_lane import LongLane
from jobledger.reactors.outcome import OutcomePath
from jobledger.reactors.pause import PauseMap
from jobledger.storage.port import Wake

if TYPE_CHECKING:
    from jobledger.engine import Engine

logger = logging.getLogger("jobledger.runtime")


class Reactor(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...


class Runtime:
    def __init__(
        self,
        engine: Engine,
        *,
        pod_id: str | None = None,
        reactors: Sequence[Reactor] = (),
        services: Sequence[Reactor] = (),
    ) -> None:
        """`reactors` make work (the schedule ticker): started after the lanes and
        stopped before them. `services` are what handlers use (the Kafka producer, the
        lossy runner): started before the lanes and stopped after the last in-flight
        run has finished, so no run meets a stopped producer."""
        self.engine = engine
        self.pod = pod_id or make_pod_id()
        self.reactors = list(reactors)
        self.services = list(services)
        settings = engine.settings
        self.pauses = PauseMap(engine.clock, settings.probe_interval_s, engine.observers)
        self.outcomes = OutcomePath(engine, self.pauses)
        self.committer = GroupCommitter(engine.store, engine.clock, self.pod)
        self.fast = FastLane(engine, self.pod, self.outcomes, self.committer)
        self.long = LongLane(engine, self.pod, self.outcomes)
        self.leases = PartitionLeases(
            engine.store, engine.clock, settings, self.pod, self.fast, engine.observers
        )
        self.started = False
        self._tasks: list[asyncio.Task[None]] = []
        self._started_reactors: list[Reactor] = []
        self._started_services: list[Reactor] = []
        self._froze = False

    @property
    def workers_on(self) -> bool:
        return self.engine.settings.workers

    async def start(self) -> None:
        if self.started:
            return
        self.started = True
        if not self.workers_on:
            logger.info("workers off (JOBS_WORKERS=off): pod %s only enqueues", self.pod)
            return
        for service in self.services:
            await service.start()
            self._started_services.append(service)
        feed_ready = asyncio.Event()
        self._tasks.append(asyncio.create_task(self._feed(feed_ready), name="jobledger-feed"))
        await feed_ready.wait()  # subscribed before the first read: no wake-up is lost
        await self.leases.start()
        self._tasks.append(asyncio.create_task(self.leases.run(), name="jobledger-leases"))
        self.long.start()
        for reactor in self.reactors:
            await reactor.start()
            self._started_reactors.append(reactor)
        if self.engine.settings.gc_freeze:
            gc_freeze.hold()
            self._froze = True
        logger.info("pod %s started: %d partitions", self.pod, len(self.leases.owned))

    async def stop(self) -> None:
        """Stop taking work, finish what is in flight, release partitions, leave."""
        if not self.started:
            return
        self.started = False
        await _stop_all(self._started_reactors)
        if not self.workers_on:
            return
        self.leases.stop()
        await self.long.stop()
        await self.fast.stop()
        try:
            await self.leases.release_all()
        except Exception:
            logger.exception("releasing partitions failed; their leases will expire")
        await self.committer.close()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        await _stop_all(self._started_services)
        if self._froze:
            gc_freeze.release()
            self._froze = False
        logger.info("pod %s stopped", self.pod)

    async def run_forever(self) -> None:
        """Run until SIGTERM or SIGINT, then stop cleanly."""
        try:
            await self.start()
            await wait_for_signal()
        finally:
            await self.stop()

    # --- the wake path ------------------------------------------------------------------
    def dispatch(self, wake: Wake) -> None:
        lanes = wake.lanes
        if lanes is None or Lane.FAST in lanes:
            self.fast.wake(wake.partitions)
        if lanes is None or Lane.LONG in lanes:
            self.long.wake()

    async def _feed(self, ready: asyncio.Event) -> None:
        store = self.engine.store
        while True:
            try:
                feed = store.feed()
                ready_task = asyncio.ensure_future(_mark_ready(ready))
                async for wake in feed:
                    self.dispatch(wake)
                ready_task.cancel()
                return  # the store closed its feed
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("change feed failed; waking everything and resubscribing")
                ready.set()
                self.dispatch(Wake())
                await self.engine.clock.sleep(1.0)


async def wait_for_signal(signals: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)) -> None:
    """Return once one of `signals` arrives (the SIGTERM path of a pod)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    installed: list[signal.Signals] = []
    for sig in signals:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    try:
        await stop.wait()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


async def _mark_ready(ready: asyncio.Event) -> None:
    """Set once the feed generator had its first chance to subscribe."""
    await asyncio.sleep(0)
    ready.set()


async def _stop_all(started: list[Reactor]) -> None:
    """Stop in reverse start order; one failing stop does not keep the others running."""
    for part in reversed(started):
        try:
            await part.stop()
        except Exception:
            logger.exception("%r failed to stop", part)
    started.clear()
