"""One partition worker of the fast lane: its loop and its rounds (reference
fast_lane.worker.ts, §5, §9).

`run()` waits for a wake-up (or its timers), then runs rounds until the pass over the
partition's rows (`fast_pass.PartitionPass`) finds nothing more to send. One round:

* at-most-once: the row's in-flight mark (`job_commands.dispatch`) is written lease-guarded
  before the send. Marks of every partition share commits (`GroupCommitter`), and a
  round's outcomes ride in the same commit as the partition's next mark. A mark that
  did not apply (lease lost, row closed by a takeover) means that row is not sent;
* at-least-once: no mark; the batch is sent and all its outcomes share one commit;
* the rows of one chain go strictly in order, a chain stops at its first row that
  did not succeed, and a target paused mid-round sends nothing more in that round;
* a paused target's probe is claimed when the round starts: planned earlier and taken
  meanwhile by another partition of the pod, nothing of that target goes this round.

A pod whose lease ran out (by its own clock, or as the lease guard says) sends nothing
more from that partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from jobledger.core.registry import Target
from jobledger.core.tasks import run_each
from jobledger.domain.job_outcomes import Outcome, RunResult
from jobledger.domain.jobs import Change, Job, JobStatus
from jobledger.domain.lanes import BatchPlan
from jobledger.domain.policies import send_deadline
from jobledger.reactors.fast_pass import PartitionPass
from jobledger.reactors.waiting import wait_for
from jobledger.storage.port import LeaseGuard

if TYPE_CHECKING:
    from jobledger.reactors.fast_lane import FastLane

logger = logging.getLogger("jobledger.fast_lane")


@dataclass(slots=True)
class _Ran:
    job: Job
    target: Target
    run: RunResult
    outcome: Outcome


class PartitionWorker:
    """Runs one owned partition. `step()` is one round; `run()` loops over rounds."""

    def __init__(self, lane: FastLane, partition: int, lease_until: datetime) -> None:
        self.lane = lane
        self.partition = partition
        self._lease_until = lease_until
        self._send_deadline = send_deadline(lease_until, lane.settings.partition_lease_s)
        self.event = asyncio.Event()
        # unset: the lane wakes a new worker whose partition has rows (one read for all)
        self.stopping = False
        self.lost = False
        self.in_round = False
        self.task: asyncio.Task[None] | None = None
        self.pass_ = PartitionPass(lane, partition)
        self._carried: tuple[BatchPlan, Job] | None = None  # next round, its row marked
        self._unwritten: list[_Ran] = []
        self._unreleased: list[Change] = []  # releases of unsent marks not yet written
        self._recovering = False
        self.idle = False  # waiting for a wake-up: a row handed over may skip the read
        self.hinted: list[Job] = []

    # --- control ----------------------------------------------------------------------
    @property
    def lease_until(self) -> datetime:
        """The partition's lease as this pod last renewed it (its own clock)."""
        return self._lease_until

    @lease_until.setter
    def lease_until(self, until: datetime) -> None:
        self._lease_until = until
        self._send_deadline = send_deadline(until, self.lane.settings.partition_lease_s)

    @property
    def busy(self) -> bool:
        return self.in_round or self._carried is not None

    def wake(self) -> None:
        self.event.set()

    def hint(self, job: Job) -> None:
        """A row a wake-up handed over (`Wake.jobs`); kept only while the worker waits."""
        if self.idle:
            self.hinted.append(job)

    def stop(self, *, lost: bool = False) -> None:
        self.stopping = True
        self.lost = self.lost or lost
        self.event.set()

    async def join(self) -> None:
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    # --- the loop ---------------------------------------------------------------------
    async def run(self) -> None:
        lane = self.lane
        while True:
            if self.lost or (self.stopping and self._carried is None):
                await self._release_carried("partition lost")
                return
            if not self.stopping:
                self.idle = True
                await wait_for(self.event, lane.clock, self._idle_timeout())
                self.idle = False
                self.event.clear()
            hinted, self.hinted = self.hinted, []
            try:
                if self._recovering:
                    await self._recover()
                sent = await self._hinted_round(hinted) if hinted else 0
                while (n := await self.step()) is not None:
                    sent += n
                    if self.stopping and self._carried is None:
                        break
                if sent:
                    self.event.set()  # a pass that ran rows is followed by another
            except Exception:
                lane.engine.observers.store_error("fast_round")
                logger.exception("partition %d: round failed; backing off", self.partition)
                self.pass_.finish()
                if self._carried is not None:  # marked, never sent: release it first
                    self._unreleased.append(lane.unmark(self._carried[1], "round failed"))
                    self._carried = None
                self._recovering = True
                await lane.clock.sleep(1.0)
                self.event.set()

    async def _recover(self) -> None:
        """After a round failed (a dropped connection, a restarting database): write the
        outcomes it had decided — their compare-and-set makes the retry safe — then judge
        any row of this partition still marked in flight, as a takeover would. Without
        this a mark whose outcome write failed would hold its key until the lease moved."""
        ran = self._unwritten
        if ran:
            flags = await self.lane.store.writes.apply([item.outcome.change for item in ran])
            self._unwritten = []
            for item, ok in zip(ran, flags, strict=True):
                self.lane.outcomes.finish(item.job, item.run, item.outcome, ok)
                if not ok:
                    await self.lane.outcomes.record_lost(
                        item.job, item.run, item.outcome, self.lane.pod
                    )
        if self._unreleased:  # compare-and-set: a release another writer beat is refused
            await self.lane.store.writes.apply(self._unreleased)
            self._unreleased = []
        await self.lane.take_over([self.partition])
        self._recovering = False

    def _idle_timeout(self) -> float | None:
        """Until the worker's next timer (a held retry, a paused target's probe); None
        when it has none. The pod's one safety poll (`FastLane.safety_poll`) covers a
        wake-up that never came."""
        now = self.lane.clock.now()
        waits: list[float] = []
        if self.pass_.wake_at is not None:
            waits.append((self.pass_.wake_at - now).total_seconds())
        probe = self.lane.pauses.next_probe(self.pass_.paused_seen)
        if probe is not None:
            waits.append((probe - now).total_seconds())
        return max(min(waits), 0.0) if waits else None

    async def step(self) -> int | None:
        """One round: the rows it sent, or None once the pass found nothing to run."""
        if self.lost or (self.stopping and self._carried is None):
            await self._release_carried("partition lost")
            return None
        if not self._may_send():
            await self._release_carried("lease ending")
            return None
        if self._carried is not None:
            carried, marked = self._carried
            self._carried = None
            return await self._round(carried, marked)
        plan = await self.pass_.next_plan()
        if plan is None:
            return None
        return await self._round(plan, None)

    async def _hinted_round(self, rows: list[Job]) -> int:
        """The one row a wake-up handed over while the worker was idle: marked without
        reading the partition (`Writes.mark_first` checks what the read would have told),
        then sent. 0 when it cannot be: the pass reads as before."""
        lane = self.lane
        if len(rows) != 1 or self.busy or self.stopping or self._recovering:
            return 0
        if not self._may_send():
            return 0
        self.pass_.seed(rows)
        plan = self.pass_.plan()
        risky = plan.risky
        if risky is None or plan.chains:
            self.pass_.finish()
            return 0
        change = lane.mark(risky)
        if not await lane.store.writes.mark_first(change, LeaseGuard(lane.pod, lane.clock.now())):
            self.pass_.finish()
            return 0
        row = change.row
        assert isinstance(row, Job)
        self.pass_.replace(risky, row)
        return await self._round(plan, row)

    # --- one round --------------------------------------------------------------------
    async def _round(self, plan: BatchPlan, marked: Job | None) -> int:
        lane = self.lane
        self.in_round = True
        try:
            probes = self._take_probes(plan)
            risky = plan.risky
            if risky is not None and marked is None and not self._held(risky, probes):
                change = lane.mark(risky)
                (ok,) = await lane.committer.commit([change], [True])
                marked = await self._marked(risky, change, ok)
            if self.lost:
                if marked is not None:
                    await self._write([], [(marked, "partition lost")])
                return 0
            coros = [self._chain(chain, probes) for chain in plan.chains]
            if marked is not None:
                coros.append(self._chain((marked,), probes))
            # one task per chain: a handler's timeouts (asyncio.timeout in aiokafka) must
            # cancel its own task, never the partition loop
            ran = [r for results in await run_each(coros) for r in results]
            sent = len(ran)
            lane.stats.round(sent)
            unsent: list[tuple[Job, str]] = []
            if marked is not None and all(r.job.id != marked.id for r in ran):
                # marked, not sent (its target paused, its probe taken, the lease ending):
                # its release rides in the commit of its siblings' outcomes
                unsent.append((marked, "lease ending" if self.lost else "target paused"))
            await self._write(ran, unsent)
            return sent
        finally:
            self.in_round = False

    def _take_probes(self, plan: BatchPlan) -> set[str]:
        """Claim the plan's probes now, each together with the decision to send it: the
        ids of the probe rows this round may send. A probe another partition of the pod
        took after this plan was made (planned while the round before committed) is not
        this round's: its target's rows are held (`_held`), a marked one is released."""
        taken = {t for t in plan.probes if self.lane.pauses.take_probe(t)}
        rows = [c[0] for c in plan.chains if c[0].target in taken]
        if plan.risky is not None and plan.risky.target in taken:
            rows.append(plan.risky)
        return {j.id for j in rows}

    def _held(self, job: Job, probes: set[str]) -> bool:
        """`job`'s target is paused and `job` is not a probe this round claimed."""
        return self.lane.pauses.is_paused(job.target) and job.id not in probes

    async def _marked(self, risky: Job, change: Change, ok: bool) -> Job | None:
        """The marked row, or None when the mark was refused (and why)."""
        if ok:
            row = change.row
            assert isinstance(row, Job)
            self.pass_.replace(risky, row)
            return row
        self.lane.stats.marks_refused += 1
        current = await self.lane.store.admin.get_job(risky.id)
        if current is not None and current.stream_version == risky.stream_version:
            # the row is as we read it, so the lease guard refused: the partition is gone
            logger.warning(
                "partition %d: lease lost on %s (mark refused)", self.partition, self.lane.pod
            )
            self.lost = True
            self.stopping = True
        else:
            self.pass_.drop(risky)  # closed or changed by someone else: never send it
            if current is not None and current.status == JobStatus.PENDING:
                self.pass_.requeue(current)
        return None

    async def _chain(self, chain: tuple[Job, ...], probes: set[str]) -> list[_Ran]:
        lane = self.lane
        out: list[_Ran] = []
        target = lane.engine.targets.find(chain[0].target)  # a chain is one target's key
        if target is None:
            return out
        outcomes, clock = lane.outcomes, lane.clock
        now = clock.now()  # then read once per row, after its run: its outcome's stamp
        for job in chain:
            # on the clock read when the row before ended (nothing waited since)
            if not self._may_send(now):
                break  # the lease ends (by this pod's clock) before this send could finish
            if self._held(job, probes):
                break  # paused in this round, or its probe taken: skip the rest of its batch
            run = await outcomes.run(target, job)
            now = clock.now()
            outcome = outcomes.judge(target, job, run, now)
            out.append(_Ran(job, target, run, outcome))
            if outcome.label != "ok":
                break  # a failed row stops the later versions of its key
        return out

    def _may_send(self, now: datetime | None = None) -> bool:
        """Whether a send may start now: the lease, by this pod's clock, has more than
        its safety margin left (`policies.send_deadline`). Past it, the worker stops: it
        sends no further row of the partition (the heartbeat starts a fresh worker if the
        store renewed the lease after all). `now`: the clock read just before, if the
        caller has one."""
        if self.lost:
            return False
        lane = self.lane
        if (lane.clock.now() if now is None else now) < self._send_deadline:
            return True
        self.lost = True
        self.stopping = True
        logger.warning(
            "partition %d: lease of %s ends at %s; no further send",
            self.partition,
            lane.pod,
            self.lease_until,
        )
        return False

    async def _release_carried(self, cause: str) -> None:
        """The next round's row was marked in the last commit and will not be sent now:
        release its mark (a deferral) so it neither holds its key nor dies "in flight"."""
        if self._carried is not None:
            _, marked = self._carried
            self._carried = None
            await self._write([], [(marked, cause)])

    async def _write(self, ran: list[_Ran], unsent: Sequence[tuple[Job, str]] = ()) -> None:
        """Outcomes of the round, the release of a marked row that was not sent, plus the
        partition's next mark, in one commit."""
        lane = self.lane
        replaced: dict[str, Job] = {}
        dropped: set[str] = set()
        for item in ran:
            row = item.outcome.change.row
            if isinstance(row, Job) and row.status == JobStatus.PENDING:
                replaced[item.job.id] = row
            else:
                dropped.add(item.job.id)
        releases = [lane.unmark(job, cause) for job, cause in unsent]
        for release in releases:
            row = release.row
            assert isinstance(row, Job)
            replaced[row.id] = row
        self.pass_.update(replaced, dropped)
        changes = [item.outcome.change for item in ran] + releases
        guarded = [False] * len(changes)
        next_plan: BatchPlan | None = None
        mark: Change | None = None
        if not self.stopping and not self.lost and self.pass_.buffer:
            next_plan = self.pass_.plan()
            if next_plan.risky is not None:
                mark = lane.mark(next_plan.risky)
                changes.append(mark)
                guarded.append(True)
        # nothing to run before the next page: read it while the outcomes commit
        ahead = mark is None and not self.stopping and self.pass_.start_read_ahead(next_plan)
        try:
            flags = await lane.committer.commit(changes, guarded) if changes else []
        except BaseException:
            self.pass_.abandon_read_ahead()
            self._unwritten = ran  # decided but not written: _recover writes them
            self._unreleased.extend(releases)
            raise
        lost: set[str] = set()
        outcomes = lane.outcomes
        quiet_ok = outcomes.quiet_ok()  # then an applied "ok" has nothing to finish
        for item, ok in zip(ran, flags, strict=False):
            if not ok:
                lost.add(item.job.id)
            elif quiet_ok and item.outcome.label == "ok" and not item.outcome.dead:
                continue
            outcomes.finish(item.job, item.run, item.outcome, ok)
        for release, ok in zip(releases, flags[len(ran) :], strict=False):
            if not ok:  # changed by someone else (a takeover): not ours to send
                lost.add(release.stream.partition(":")[2])
        if lost:
            self.pass_.update({}, lost)
        if ahead:
            await self.pass_.take_read_ahead(replaced, dropped | lost)
        for item, ok in zip(ran, flags, strict=False):
            if not ok:
                await lane.outcomes.record_lost(item.job, item.run, item.outcome, lane.pod)
        if mark is not None and next_plan is not None and next_plan.risky is not None:
            marked = await self._marked(next_plan.risky, mark, flags[-1])
            if marked is not None:
                self._carried = (next_plan, marked)
