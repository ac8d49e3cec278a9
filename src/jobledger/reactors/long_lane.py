"""The long lane: handlers that take minutes.

The lane is a state machine (docs/lanes.md draws it):

    IDLE ──woken, or a timer──▶ RESERVING ──rows claimed or none──▶ IDLE
    RESERVING ──the reserve failed──▶ BACKING_OFF ──1 s──▶ IDLE
    any work state ──stop()──▶ STOPPING ──its batches finished──▶ STOPPED

`LongLaneState` names the states, `_MOVES` lists every move, and the lane changes
state only through `_enter`. A reserve takes up to `long_batch` rows under one claim
token (`job_commands.claim`) with a `long_lease_s` lease; rows RUNNING past their lease
are taken back through `job_outcomes.reclaim_expired` (at-least-once → run again from
the start, at-most-once → DEAD: the first run may have finished its side effect). Each batch
runs in a background task whose heartbeat renews the lease every `long_heartbeat_s`, so
a 7-minute run is never reclaimed; every run goes through the outcome path both lanes
share (`OutcomePath`: run, judge, write, settle). Exclusive targets (every schedule)
have at most one RUNNING row per code across pods: the reserve skips live
`running_codes`, and the store's uniqueness on `running_code` settles races. Every
write is a compare-and-set on the row, so a pod whose claim was taken over cannot
write a stale outcome. The claims of a pod that died are taken over at once by the pod that finds its
liveness token free (`take_over_claims`, decisions D57), and a pod that lost its token
claims nothing until it has it back. A stop that cancels runs outliving it gives their
at-least-once rows back, due now (`give_back`, D52).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from jobledger.core.ids import new_token
from jobledger.core.tasks import cancel_and_wait
from jobledger.domain import job_commands, job_outcomes
from jobledger.domain.events import SYSTEM
from jobledger.domain.job_outcomes import Outcome, OutcomeLabel
from jobledger.domain.jobs import DeliveryMode, Job, JobStatus, Lane, Stamp
from jobledger.domain.lanes import TargetView, pick_long
from jobledger.reactors.outcome import OutcomePath, Ran
from jobledger.reactors.states import Moves
from jobledger.reactors.waiting import safety_poll_s, wait_for

if TYPE_CHECKING:
    from jobledger.engine import Engine

logger = logging.getLogger("jobledger.long_lane")

#: candidates read per reserve, so busy exclusive codes do not crowd out other rows
CANDIDATE_FACTOR = 10


class LongLaneState(enum.Enum):
    IDLE = "idle"  # waiting for a wake-up, the earliest due row or a probe
    RESERVING = "reserving"  # claiming rows; a claimed batch starts in its own task
    BACKING_OFF = "backing off"  # a reserve failed: looks again in 1 s
    STOPPING = "stopping"  # takes no more rows; the running batches finish
    STOPPED = "stopped"


IDLE, RESERVING = LongLaneState.IDLE, LongLaneState.RESERVING
BACKING_OFF, STOPPING, STOPPED = (
    LongLaneState.BACKING_OFF,
    LongLaneState.STOPPING,
    LongLaneState.STOPPED,
)

#: every move of the long lane; a stop is asked for from outside, in any work state
_MOVES = Moves(
    {
        IDLE: {RESERVING, STOPPING},
        RESERVING: {IDLE, BACKING_OFF, STOPPING},
        BACKING_OFF: {IDLE, STOPPING},
        STOPPING: {STOPPED},
        STOPPED: set(),
    },
    work={IDLE, RESERVING, BACKING_OFF},
)


class LongLane:
    def __init__(
        self, engine: Engine, pod: str, outcomes: OutcomePath, *, max_running: int = 100
    ) -> None:
        self.engine = engine
        self.store = engine.store
        self.clock = engine.clock
        self.settings = engine.settings
        self.pod = pod
        self.outcomes = outcomes
        self.pauses = outcomes.pauses
        self.max_running = max_running
        self.state = IDLE
        self.event = asyncio.Event()
        self.event.set()
        self.current: dict[str, Job] = {}  # rows this pod runs, as last written
        #: rows whose run has not ended yet (the handler, or its outcome's write)
        self.running: set[str] = set()
        self.batches: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()  # renewals and outcomes of a row never interleave
        self._task: asyncio.Task[None] | None = None
        #: the clock when `reserve` last looked for rows (a row due since then is news)
        self._looked_at = datetime.min.replace(tzinfo=UTC)
        #: the earliest due PENDING row when `next_due` was last read
        self._due: datetime | None = None
        #: whether the pod may claim rows now: not while its liveness token is lost and
        #: not taken back (`PartitionLeases` sets it): a takeover may requeue its claims
        self.may_claim: Callable[[], bool] = lambda: True

    # --- life cycle --------------------------------------------------------------------
    def _enter(self, state: LongLaneState) -> None:
        self.state = _MOVES.move(self.state, state, "the long lane")

    @property
    def stopping(self) -> bool:
        """Stopping or stopped: the lane takes no more rows."""
        return self.state not in _MOVES.work

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name="jobledger-long-lane")

    def wake(self) -> None:
        self.event.set()

    async def stop(self) -> None:
        """Take no more rows and wait for the running batches (SIGTERM path)."""
        if not self.stopping:
            self._enter(STOPPING)
        self.event.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.drain()
        self._enter(STOPPED)

    async def drain(self) -> None:
        while self.batches:
            await asyncio.gather(*list(self.batches), return_exceptions=True)

    async def run(self) -> None:
        """Wait (IDLE), reserve (RESERVING) and start the batch claimed, again, until
        stopped."""
        quiet = False  # the last look was a safety poll that found nothing
        while not self.stopping:
            self._enter(IDLE)
            woken = await wait_for(self.event, self.clock, await self._idle_timeout(quiet))
            self.event.clear()
            if self.stopping:
                break
            self._enter(RESERVING)
            try:
                reserved = await self.reserve()
            except Exception:
                self.engine.observers.store_error("long_reserve")
                logger.exception("long lane reserve failed; backing off")
                self._enter(BACKING_OFF)
                await self.clock.sleep(1.0)
                self.event.set()
                quiet = False
                continue
            if reserved:
                self.start_batch(reserved)
                self.event.set()  # there may be more
            quiet = not woken and not reserved

    async def _idle_timeout(self, quiet: bool = False) -> float:
        """How long to wait for a wake-up: the safety poll, shortened to the earliest
        due row and to the next pause probe.

        The earliest due row is read again unless `quiet` (the last wait ended on its
        timer and the look after it found nothing) and the due time read before has not
        passed: every write of a row wakes the lane, so only a lost wake-up can have
        hidden a row since, and then a row due in the future is found by a later safety
        poll (at most one poll late) instead of by its own timer. An idle pod so sends
        one statement per safety poll instead of two.
        """
        timeout = safety_poll_s(self.settings.safety_poll_s)
        if self.event.is_set():
            return timeout
        now = self.clock.now()
        if quiet and (self._due is None or self._due > now):
            due = self._due
        else:
            due = self._due = await self.store.queue.next_due([], Lane.LONG)
            now = self.clock.now()  # after the read: the clock may have moved meanwhile
        if due is not None and due > now:
            timeout = min(timeout, (due - now).total_seconds())
        elif due is not None and due > self._looked_at:
            # due already, but not yet when reserve last looked (the clock moved during
            # that look): look again at once. A row that was due then and still waits
            # (paused target, busy code, no room) waits for its wake-up, not a spin.
            timeout = 0.0
        probe = self.pauses.next_probe(set(self.pauses.paused()))
        if probe is not None:
            timeout = min(timeout, max((probe - now).total_seconds(), 0.0))
        return timeout

    # --- reserve -----------------------------------------------------------------------
    def _views(self, rows: list[Job]) -> dict[str, TargetView]:
        views: dict[str, TargetView] = {}
        for job in rows:
            target = self.engine.targets.find(job.target)
            if target is None or target.lane != Lane.LONG or job.target in views:
                continue
            views[job.target] = self.pauses.view(target)
        return views

    async def reserve(self) -> list[Job]:
        """Claim up to `long_batch` rows under one token; the rows now RUNNING here."""
        now = self._looked_at = self.clock.now()
        room = min(self.settings.long_batch, self.max_running - len(self.current))
        if room <= 0 or self.stopping or not self.may_claim():
            return []
        candidates = await self.store.queue.long_candidates(
            now, limit=self.settings.long_batch * CANDIDATE_FACTOR
        )
        if not candidates:
            return []
        codes = await self.store.queue.running_codes(now)
        views = self._views(candidates)
        picked = pick_long(candidates, now, views, codes, room)
        if not picked:
            return []
        token = new_token()
        lease = timedelta(seconds=self.settings.long_lease_s)
        stamp = Stamp(now, SYSTEM, None)
        decided: list[tuple[Job, Outcome]] = []
        for job in picked:
            view = views[job.target]
            if view.paused:
                self.pauses.take_probe(job.target)
            job_stamp = Stamp(stamp.at, SYSTEM, job.trace_id)
            if job.status == JobStatus.RUNNING:
                outcome = job_outcomes.reclaim_expired(
                    job,
                    view.mode,
                    token=token,
                    pod=self.pod,
                    lease=lease,
                    exclusive=view.exclusive,
                    stamp=job_stamp,
                )
            else:
                change = job_commands.claim(
                    job,
                    token=token,
                    pod=self.pod,
                    lease=lease,
                    exclusive=view.exclusive,
                    stamp=job_stamp,
                )
                outcome = Outcome(change, OutcomeLabel.CLAIMED)
            decided.append((job, outcome))
        flags = await self.store.writes.apply([o.change for _, o in decided])
        claimed: list[Job] = []
        for (job, outcome), ok in zip(decided, flags, strict=True):
            if not ok:
                continue  # another pod, or the running_code uniqueness, won the race
            if outcome.dead:
                reason = "lease expired while running; the first run may have finished"
                self.outcomes.judged(job, outcome, reason)
                continue
            row = outcome.change.row
            assert isinstance(row, Job)
            self.current[row.id] = row
            claimed.append(row)
        return claimed

    async def take_over_claims(self, rows: Sequence[Job]) -> None:
        """The rows a dead pod was running (`Liveness.claims_of`; its token is free):
        at-least-once → requeued for the next reserve of any pod, at-most-once → DEAD,
        as when their lease runs out (`job_outcomes.claim_of_dead_pod`), but now."""
        await self.outcomes.judge_left_behind(
            rows,
            job_outcomes.claim_of_dead_pod,
            "its pod died while running; the run may have finished",
        )
        self.event.set()  # requeued rows are due: look again

    # --- running a batch -------------------------------------------------------------------
    def start_batch(self, rows: list[Job]) -> asyncio.Task[None]:
        task = asyncio.create_task(self.run_batch(rows), name="jobledger-long-batch")
        self.batches.add(task)
        task.add_done_callback(self.batches.discard)
        return task

    async def run_batch(self, rows: list[Job]) -> None:
        ids = [row.id for row in rows]
        beat = asyncio.create_task(self._heartbeat(ids), name="jobledger-long-heartbeat")
        try:
            await asyncio.gather(*(self._run_row(row) for row in rows))
        finally:
            await cancel_and_wait(beat)
            self.event.set()  # codes freed, room made: look again

    async def _run_row(self, row: Job) -> None:
        target = self.engine.targets.find(row.target)
        if target is None:  # pragma: no cover - reserve only picks registered targets
            self.current.pop(row.id, None)
            return
        self.running.add(row.id)
        try:
            run = await self.outcomes.run(target, row)
            async with self._lock:
                latest = self.current.get(row.id, row)
                outcome = self.outcomes.judge(target, latest, run)
                (ok,) = await self.store.writes.apply([outcome.change])
                # only once written: a stop that cuts the write short gives the row back
                self.current.pop(row.id, None)
            # a claim taken over loses the compare-and-set: the run still goes in the log
            await self.outcomes.settle([Ran(latest, target, run, outcome)], [ok], self.pod)
        except Exception:
            self.engine.observers.store_error("long_outcome")
            self.current.pop(row.id, None)
            logger.exception("long lane: writing the outcome of job %s failed", row.id)
        finally:
            self.running.discard(row.id)

    # --- a stop that cut runs short ----------------------------------------------------------
    async def give_back(self) -> None:
        """The rows this pod still holds after its stop cancelled their runs (they
        outlived the runs' share of `stop_timeout_s`; no outcome was written), judged by
        `job_outcomes.stopped_while_running`: at-least-once rows are given back (PENDING,
        claim dropped, no attempt spent, due now: another pod, or this one restarted,
        starts them at once instead of after `long_lease_s`); at-most-once rows keep
        their claim, for whoever takes it over to judge DEAD. A run that ignored its
        cancellation keeps its row too: it may still be running."""
        async with self._lock:  # no lease renewal of a stubborn run's batch meanwhile
            left = [row for row_id, row in self.current.items() if row_id not in self.running]
            if not left:
                return
            judged = await self.outcomes.judge_left_behind(
                left, job_outcomes.stopped_while_running, "its pod stopped while it ran"
            )
            given = [job.id for job, _, ok in judged if ok]
            for row_id in given:
                self.current.pop(row_id, None)
        logger.warning(
            "pod %s stopping: gave back %d long-lane runs cut short (PENDING, due now); %d"
            " rows keep their claim (at-most-once, or a run still going) for the pod that"
            " takes them over",
            self.pod,
            len(given),
            len(self.current),
        )

    def modes_running(self) -> Counter[DeliveryMode]:
        """The rows this pod holds claimed now, by their target's delivery mode."""
        modes: Counter[DeliveryMode] = Counter()
        for row in self.current.values():
            target = self.engine.targets.find(row.target)
            modes[target.delivery_mode if target is not None else DeliveryMode.AT_MOST_ONCE] += 1
        return modes

    async def _heartbeat(self, ids: list[str]) -> None:
        lease = timedelta(seconds=self.settings.long_lease_s)
        beat = timedelta(seconds=self.settings.long_heartbeat_s)
        next_beat = self.clock.now() + beat
        while True:
            # a fixed schedule, not a relative sleep after each renewal: a slow write must
            # not push every later beat back (and the lease toward expiry)
            await self.clock.sleep((next_beat - self.clock.now()).total_seconds())
            next_beat = max(next_beat + beat, self.clock.now())
            async with self._lock:
                rows = [self.current[i] for i in ids if i in self.current]
                if not rows:
                    return
                stamp = Stamp(self.clock.now(), SYSTEM, None)
                changes = [job_commands.renew_lease(r, lease=lease, stamp=stamp) for r in rows]
                try:
                    flags = await self.store.writes.apply(changes)
                except Exception:
                    self.engine.observers.store_error("long_renew")
                    logger.exception("long lane: lease renewal failed; retrying next beat")
                    continue
                for row, change, ok in zip(rows, changes, flags, strict=True):
                    if ok and isinstance(change.row, Job):
                        self.current[row.id] = change.row
                    elif not ok:
                        # taken over by another pod: its outcome would lose the CAS anyway
                        logger.warning("long lane: claim on job %s was taken over", row.id)
