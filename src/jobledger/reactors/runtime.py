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
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from jobledger.core.tasks import cancel_and_wait
from jobledger.domain.jobs import DeliveryMode, Lane
from jobledger.reactors import gc_freeze
from jobledger.reactors.commit import MAX_COMMIT_CHANGES, GroupCommitter
from jobledger.reactors.fast_lane import FastLane
from jobledger.reactors.leases import PartitionLeases, make_pod_id
from jobledger.reactors.long_lane import LongLane
from jobledger.reactors.outcome import OutcomePath
from jobledger.reactors.pause import PauseMap
from jobledger.storage.feed import Wake

if TYPE_CHECKING:
    from jobledger.engine import Engine

logger = logging.getLogger("jobledger.runtime")

#: shares of `settings.stop_timeout_s`: the runs in flight (and the reactors' stops) get
#: until FINISH_SHARE of it, releasing the partitions and the rest of leaving until
#: LEAVE_SHARE; what is left is for the caller closing the store
FINISH_SHARE = 0.7
LEAVE_SHARE = 0.85
#: how long a cancelled part of the stop is waited for before the stop goes on
UNWIND_S = 0.5


@dataclass(frozen=True, slots=True)
class InFlight:
    """A pod's work under way (`Runtime.in_flight`)."""

    at_least_once: int  # long-lane rows claimed, at-least-once targets
    at_most_once: int  # long-lane rows claimed, at-most-once targets
    fast_rounds: int  # fast-lane partitions with a round in progress
    tokens: bool  # the store has liveness tokens: a takeover follows the process's end


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
        # a store may ask for larger, gathered group commits (SQLite: docs/performance.md)
        most = int(getattr(engine.store, "group_commit_changes", MAX_COMMIT_CHANGES))
        turns = int(getattr(engine.store, "group_commit_gather_turns", 0))
        self.committer = GroupCommitter(
            engine.store, engine.clock, self.pod, max_changes=most, gather_turns=turns
        )
        self.fast = FastLane(engine, self.pod, self.outcomes, self.committer)
        self.long = LongLane(engine, self.pod, self.outcomes)
        self.leases = PartitionLeases(
            engine.store,
            engine.clock,
            settings,
            self.pod,
            self.fast,
            engine.observers,
            self.long,
            paused=self.pauses.paused,  # each heartbeat says the pod's paused targets
        )
        self.started = False
        self._tasks: list[asyncio.Task[None]] = []
        self._lease_task: asyncio.Task[None] | None = None
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
        # subscribed before the first read of a queue, so no wake-up is lost: the fast
        # lane waits for it before it reads which new partitions have rows; the leases
        # are taken (and what their owners left in flight judged) while it subscribes
        self.fast.subscribed = feed_ready
        await self.leases.start()
        await feed_ready.wait()  # before the long lane's first read
        self._lease_task = asyncio.create_task(self.leases.run(), name="jobledger-leases")
        self._tasks.append(self._lease_task)
        self._tasks.append(asyncio.create_task(self.fast.poll_forever(), name="jobledger-poll"))
        self.long.start()
        for reactor in self.reactors:
            await reactor.start()
            self._started_reactors.append(reactor)
        if self.engine.settings.gc_freeze:
            gc_freeze.hold()
            self._froze = True
        logger.info("pod %s started: %d partitions", self.pod, len(self.leases.owned))

    async def stop(self) -> None:
        """Stop taking work, finish what is in flight, release partitions, leave.

        Bounded by `settings.stop_timeout_s` (T), so a pod leaves even when its database
        or broker does not answer (docs/operations.md, "Stopping a pod"): the reactors
        and the runs in flight get until 0.7 T, then the runs still going are cancelled
        and their rows have no outcome written: the long lane gives its at-least-once
        rows back (due now, no attempt spent: `LongLane.give_back`), the other rows are
        judged by whoever takes them over, as after a crash; giving back, releasing the
        partitions and deleting the liveness row are tried until 0.85 T (leases left
        behind expire); the rest of T is for closing the store."""
        if not self.started:
            return
        self.started = False
        limit = self.engine.settings.stop_timeout_s
        now = asyncio.get_running_loop().time()
        finish_by, leave_by = now + limit * FINISH_SHARE, now + limit * LEAVE_SHARE
        await _bounded(_stop_all(self._started_reactors), finish_by, "stopping the reactors")
        if not self.workers_on:
            return
        self.leases.stop()
        # the heartbeat's last beat ends first: a take it has on the way would otherwise
        # land after the release below, leasing partitions to a pod that has left
        await _bounded(self._heartbeat_ended(), finish_by, "ending the partition heartbeat")
        await _bounded(
            self._finish_in_flight(),
            finish_by,
            "finishing the runs in flight",
            on_late=self._cancel_in_flight,
        )
        await _bounded(self.long.give_back(), leave_by, "giving back the long-lane rows")
        if self._lanes_done():
            await _bounded(
                self.leases.release_all(),
                leave_by,
                "releasing the partitions (their leases will expire)",
            )
        else:
            logger.warning(
                "pod %s: runs still unwinding; its partition leases will expire", self.pod
            )
        await _bounded(cancel_and_wait(*self._tasks), leave_by, "stopping the feed")
        self._tasks.clear()
        await _bounded(_stop_all(self._started_services), leave_by, "stopping the services")
        if self._froze:
            gc_freeze.release()
            self._froze = False
        logger.info("pod %s stopped", self.pod)

    async def _heartbeat_ended(self) -> None:
        if self._lease_task is not None:
            await asyncio.wait({self._lease_task})

    async def _finish_in_flight(self) -> None:
        await asyncio.gather(self.long.stop(), self.fast.stop())
        await self.committer.close()

    def in_flight(self) -> InFlight:
        """What this pod runs now: its long-lane rows by delivery mode, its fast-lane
        partitions in a round, and whether its store has liveness tokens (another pod
        then takes it over as soon as its process is gone)."""
        modes = self.long.modes_running()
        return InFlight(
            at_least_once=modes[DeliveryMode.AT_LEAST_ONCE],
            at_most_once=modes[DeliveryMode.AT_MOST_ONCE],
            fast_rounds=sum(1 for p in list(self.fast.workers) if self.fast.busy(p)),
            tokens=self.leases.liveness is not None,
        )

    def _cancel_in_flight(self) -> None:
        """Cancel the lanes' runs still going: their rows keep no outcome, so they stay
        for the next owner (partition takeover, long-lane lease expiry)."""
        for task in self._lane_tasks():
            task.cancel()

    def _lane_tasks(self) -> list[asyncio.Task[None]]:
        tasks = [w.task for w in self.fast.workers.values() if w.task is not None]
        return tasks + list(self.long.batches)

    def _lanes_done(self) -> bool:
        """No partition worker or long batch still runs: releasing the leases is safe."""
        return all(task.done() for task in self._lane_tasks())

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
            self.fast.wake(wake.partitions, wake.jobs)
        if lanes is None or Lane.LONG in lanes:
            self.long.wake()

    async def _feed(self, ready: asyncio.Event) -> None:
        store = self.engine.store
        while True:
            try:
                feed = store.feed()
                feed.on_wake = self.dispatch  # as published: no task switch on the wake path
                await feed.open()
                ready.set()
                async for wake in feed:
                    self.dispatch(wake)
                return  # the store closed its feed
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("change feed failed; waking everything and resubscribing")
                ready.set()
                self.dispatch(Wake())
                await self.engine.clock.sleep(1.0)


@contextlib.contextmanager
def stop_on_signals(
    stop: asyncio.Event, *, then: Callable[[int], None] | None = None
) -> Iterator[None]:
    """SIGINT / SIGTERM set `stop`; once it is set, another one calls `then` with the
    signal's number (the second Ctrl-C: `abandon`), when given."""
    loop = asyncio.get_running_loop()
    installed = []

    def arrived(sig: int) -> None:
        if stop.is_set() and then is not None:
            then(sig)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, arrived, int(sig))
            installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


async def wait_for_signal() -> None:
    """Return once SIGINT or SIGTERM arrives (the SIGTERM path of a pod)."""
    stop = asyncio.Event()
    with stop_on_signals(stop):
        await stop.wait()


async def _bounded(
    work: Awaitable[None], until: float, what: str, *, on_late: Callable[[], None] | None = None
) -> bool:
    """Await `work` until the loop time `until`; True when it finished without error.

    Late work is cancelled (after `on_late`, which cancels what it waits for) and given
    `UNWIND_S` to unwind; the stop then goes on without it, whatever it still waits for.
    """
    task = asyncio.ensure_future(work)
    loop = asyncio.get_running_loop()
    done, _ = await asyncio.wait({task}, timeout=max(until - loop.time(), 0.0))
    if not done:
        logger.warning("stop: %s is late (stop_timeout_s); cancelling it", what)
        if on_late is not None:
            on_late()
        task.cancel()
        await asyncio.wait({task}, timeout=UNWIND_S)
        task.add_done_callback(_retrieve)
        return False
    if not task.cancelled() and (exc := task.exception()) is not None:
        logger.error("stop: %s failed", what, exc_info=exc)
        return False
    return True


def _retrieve(task: asyncio.Future[None]) -> None:
    """Mark the outcome of a part the stop gave up on as seen (it was logged as late)."""
    if not task.cancelled():
        task.exception()


async def _stop_all(started: list[Reactor]) -> None:
    """Stop in reverse start order; one failing stop does not keep the others running."""
    for part in reversed(started):
        try:
            await part.stop()
        except Exception:
            logger.exception("%r failed to stop", part)
    started.clear()
