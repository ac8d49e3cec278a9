"""Partition leases: which pod runs which fast-lane partition, and the takeover of a
pod that died.

Every `heartbeat_s` a pod writes its liveness row, renews the leases it holds
(`partition_lease_s`) and reads the lease rows, in one `store.coordination.beat` (one statement on
PostgreSQL), and moves toward its fair share (`domain.policies.share_target`):
ceil(P / live pods), or max(floor, 1) while another live pod is below the floor. Takes
are atomic (`store.coordination.take_partitions`, one statement for the whole share on PostgreSQL),
so two pods never hold one partition; a busy partition (a round in progress) is never
released. Leases and liveness rows are coordination state: plain compare-and-set rows,
no events.

Death, not silence (decisions D53-D57). Where the store offers liveness tokens
(`storage.liveness`: an advisory lock on PostgreSQL, a file lock on SQLite) a pod holds
one while its process lives, and takes or renews partitions only while it does. A watch
task waits on the tokens of the other pods that advertise one (`Beat.watched`). When one
is free, the pod waits `death_grace_s` — a live pod whose token was taken (its
connection dropped) notices within milliseconds and stops sending meanwhile — then,
holding the dead pod's token so it cannot come back midway (`Liveness.confirmed`),
takes all its partitions, judged as after any takeover (`acquired`), and its long-lane
claims (`ClaimListener`). A pod that loses its own token suspends every partition at
once (`PartitionListener.suspend`), takes its token back and beats: it keeps what nobody
took meanwhile. What a token cannot see — a pod alive, connected and hung, a store
without tokens — the lease still covers: it runs out and any pod takes the partition.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from jobledger.config.settings import Settings
from jobledger.core.clock import Clock
from jobledger.core.tasks import cancel_and_wait
from jobledger.domain.jobs import Job
from jobledger.domain.policies import death_grace_s, share_target
from jobledger.observability.observe import Observer
from jobledger.reactors.waiting import wait_for
from jobledger.storage.port import Beat, Store

logger = logging.getLogger("jobledger.leases")


def make_pod_id() -> str:
    """hostname:pid:uuid8: the host and process a pod runs in, and 8 hex digits."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class PartitionListener(Protocol):
    """The fast lane, as the lease keeper sees it."""

    async def acquired(self, partitions: Sequence[int], until: datetime) -> None: ...
    async def renewed(self, partitions: Iterable[int], until: datetime) -> None: ...
    async def lost(self, partition: int) -> None: ...
    async def release(self, partition: int) -> None: ...
    def busy(self, partition: int) -> bool: ...
    def suspend(self, partitions: Iterable[int]) -> None:
        """Start no send from `partitions` any more (this pod's token is gone: they may
        be taken at any moment); the next `renewed` or `lost` settles each of them."""


class ClaimListener(Protocol):
    """The long lane, as the lease keeper sees it: the claims of dead pods; it claims
    nothing while `may_claim()` is false (this pod's token is lost, not yet taken back)."""

    may_claim: Callable[[], bool]

    async def take_over_claims(self, rows: Sequence[Job]) -> None: ...
    def wake(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Takeover:
    """Pods found dead and taken over by this pod (`PartitionLeases.takeovers`)."""

    pods: tuple[str, ...]
    found_at: datetime
    taken_at: datetime
    partitions: tuple[int, ...]
    claims: int


class PartitionLeases:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        settings: Settings,
        pod: str,
        listener: PartitionListener,
        observers: Observer,
        claims: ClaimListener | None = None,
        paused: Callable[[], Mapping[str, datetime]] | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.settings = settings
        self.pod = pod
        self.listener = listener
        self.observers = observers
        self.claims = claims
        self.owned: dict[int, datetime] = {}
        self._rng = random.Random(pod)
        self._stop = asyncio.Event()
        self._beat_now = asyncio.Event()  # the stop, or a token taken back: beat at once
        #: the targets paused on this pod and since when, said with each heartbeat (the
        #: dashboard of a process without workers reads them from the pods' rows)
        self.paused = paused
        #: this pod's liveness token; None: the store has none (leases alone)
        self.liveness = store.coordination.liveness(pod)
        if self.liveness is not None:
            self.liveness.on_lost = self._token_lost
            if claims is not None:
                claims.may_claim = self._token_kept
        self.grace_s = death_grace_s(settings.partition_lease_s)
        #: the other pods whose tokens the watch looks at (the last beat's `watched`)
        self.watched: frozenset[str] = frozenset()
        self._watched_changed = asyncio.Event()
        self._lock = asyncio.Lock()  # a beat and a takeover never interleave
        self._lost = False  # the token was lost and not taken back yet
        self.takeovers: list[Takeover] = []  # the last 100

    @property
    def partitions(self) -> int:
        return self.settings.partitions

    async def start(self) -> None:
        """Seed the lease rows (idempotent, race-safe in the store) and take a share.

        A first beat that fails once the store answered the seeding (a backend terminated
        or a restart under way) does not fail the pod's start: the heartbeat loop beats
        again (every step of a beat is safe to repeat), as after any beat that failed."""
        holding = None  # the token's connection opens while the rows are seeded
        if self.liveness is not None:
            holding = asyncio.ensure_future(self.liveness.hold())
        try:
            await self.store.coordination.seed_partitions(self.partitions)
        except BaseException:
            await cancel_and_wait(holding)
            raise
        try:
            if holding is not None:
                await holding
            await self.tick()
        except Exception:
            self.observers.store_error("heartbeat")
            logger.exception("the first partition lease heartbeat failed; retrying next beat")

    async def run(self) -> None:
        """The heartbeat loop, and the watch on other pods' tokens beside it; ends when
        `stop()` is called."""
        watch = None
        if self.liveness is not None:
            watch = asyncio.create_task(self._watch(), name="jobledger-death-watch")
        try:
            while not self._stop.is_set():
                await wait_for(self._beat_now, self.clock, self.settings.heartbeat_s)
                self._beat_now.clear()
                if self._stop.is_set():
                    break
                try:
                    await self.tick()
                except Exception:
                    self.observers.store_error("heartbeat")
                    logger.exception("partition lease heartbeat failed; retrying next beat")
        finally:
            await cancel_and_wait(watch)

    def stop(self) -> None:
        self._stop.set()
        self._beat_now.set()

    def _token_held(self) -> bool:
        return self.liveness is None or self.liveness.held

    def _token_kept(self) -> bool:
        """Not lost since it was last held: the long lane may claim rows. A token never
        taken yet (a first hold that failed) advertises nothing, so no pod takes this
        one over by it, and its claims wait for their leases as before."""
        return not self._lost

    async def tick(self) -> None:
        """One heartbeat (one `store.coordination.beat`: liveness, renewals, the live pods and the
        lease rows), then rebalance toward the fair share. Without its token (lost, or
        never taken) the pod first takes it; if it cannot, the beat fails and its leases
        run out."""
        async with self._lock:
            if not self._token_held():
                assert self.liveness is not None
                await self.liveness.hold()
                if self._lost and self.claims is not None:
                    self.claims.wake()  # it claimed nothing while the token was lost
                self._lost = False
            now = self.clock.now()
            until = now + timedelta(seconds=self.settings.partition_lease_s)
            since = now - timedelta(seconds=self.settings.worker_live_s)
            paused = self.paused() if self.paused is not None else None
            beat = await self.store.coordination.beat(
                self.pod, now, sorted(self.owned), until, since, paused
            )
            self._watch_only(beat.watched)
            await self._renewed(beat.held, until)
            await self._rebalance(beat, now, until)
            self.observers.partitions_owned(self.pod, len(self.owned))

    async def _give(self, partitions: list[int], until: datetime, *, new: bool) -> None:
        """Hand `partitions` to the lane, acquired (`new`) or renewed until `until`. If
        this pod's token is gone, or goes while the lane takes them, they are suspended
        again: a lease this pod cannot vouch for must not restart a send."""
        if new:
            await self.listener.acquired(partitions, until)
        else:
            await self.listener.renewed(partitions, until)
        if not self._token_held():
            self.listener.suspend(partitions)

    # --- the death watch ---------------------------------------------------------------
    def _watch_only(self, pods: Iterable[str]) -> None:
        watched = frozenset(pods) - {self.pod}
        if watched != self.watched:
            self.watched = watched
            self._watched_changed.set()

    def _token_lost(self) -> None:
        """This pod's token is gone while it lives: another pod may take its partitions
        after `grace_s`. No send starts from them any more; the heartbeat takes the
        token back and beats now, keeping what nobody took meanwhile."""
        logger.warning(
            "pod %s lost its liveness token: suspending %d partitions", self.pod, len(self.owned)
        )
        self._lost = True
        self.listener.suspend(sorted(self.owned))
        self._beat_now.set()

    async def _watch(self) -> None:
        """Wait for a watched pod's token to be free, take that pod over, repeat; the
        wait starts again whenever the set of watched pods changes."""
        assert self.liveness is not None
        while True:
            self._watched_changed.clear()
            finder = asyncio.ensure_future(self.liveness.wait_dead(sorted(self.watched)))
            changed = asyncio.ensure_future(self._watched_changed.wait())
            try:
                await asyncio.wait({finder, changed}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                await cancel_and_wait(changed, None if finder.done() else finder)
            if finder.cancelled():
                continue
            try:
                await self._bury(finder.result())
            except Exception:
                logger.exception("pod %s: watching or taking over other pods failed", self.pod)
                await self.clock.sleep(1.0)

    async def _bury(self, dead: list[str]) -> None:
        """Take over the `dead` pods after the grace: their partitions (all of them, live
        leases included; the next beats even the shares out) and their long-lane
        claims, while holding their tokens."""
        assert self.liveness is not None
        found = self.clock.now()
        logger.info("pods %s: liveness token free; taking over in %.2f s", dead, self.grace_s)
        await self.clock.sleep(self.grace_s)
        if self._stop.is_set():
            return
        if not self._token_held():  # this pod may be the one about to be taken over
            await self.clock.sleep(1.0)  # the heartbeat takes the token back meanwhile
            return
        async with self._lock:
            if not self._token_held():
                return
            async with self.liveness.confirmed(dead) as gone:
                now = self.clock.now()
                until = now + timedelta(seconds=self.settings.partition_lease_s)
                taken = (
                    await self.liveness.take_partitions(gone, self.pod, now, until) if gone else []
                )
                for partition in taken:
                    self.owned[partition] = until
                rows = await self.liveness.claims_of(gone) if gone and self.claims else []
                if rows and self.claims is not None:
                    await self.claims.take_over_claims(rows)
            self.watched = self.watched - set(gone)
            if not gone:
                logger.info("pods %s hold their liveness tokens again", dead)
                return
            # a pod that stopped cleanly released its partitions before its token: take
            # this pod's share of them now rather than at the next heartbeat
            self._beat_now.set()
            logger.log(
                logging.WARNING if taken or rows else logging.INFO,
                "pod %s took over dead pods %s: %d partitions, %d long-lane claims",
                self.pod,
                gone,
                len(taken),
                len(rows),
            )
            if taken:
                await self._give(taken, until, new=True)
            self.observers.partitions_owned(self.pod, len(self.owned))
            self.takeovers = [
                *self.takeovers[-99:],
                Takeover(tuple(gone), found, now, tuple(taken), len(rows)),
            ]

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
            await self._give(sorted(held), until, new=False)

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
        if mine < target and self._token_held():
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
                await self._give(sorted(taken), until, new=True)
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
        """Clean shutdown: stop every partition, release the leases, drop the liveness
        row, then the token.

        The release names every partition, not only those this pod knows it holds: a
        take whose answer never arrived (cancelled by the stop) may have committed, and
        the store releases only rows this pod owns."""
        for partition in sorted(self.owned):
            await self.listener.release(partition)
        try:
            await self.store.coordination.release_partitions(self.pod, range(self.partitions))
            self.owned.clear()
        finally:  # the liveness row goes even when the release failed (its leases expire)
            try:
                await self.store.coordination.remove_worker(self.pod)
            finally:  # last: a pod that sees the token free finds nothing left to take
                if self.liveness is not None:
                    await self.liveness.release()
        self.observers.partitions_owned(self.pod, 0)
