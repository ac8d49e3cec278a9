"""The rounds of one partition worker (`Rounds`): mark, send, write.

1. at-most-once: the round's row gets its in-flight mark (`job_commands.dispatch`),
   committed lease-guarded before the send: usually in the previous round's commit
   (the carried mark, `_next_round`), else in a commit of its own. A mark that did not
   apply (lease lost, row closed by a takeover) means that row is not sent;
2. the chains are sent concurrently, each strictly in order, each stopping at its first
   row that did not succeed; a target paused mid-round sends nothing more this round,
   and no send starts once the lease's safety margin is reached
   (`WorkerStatus.may_send`);
3. the round is written (`_round_changes`: its outcomes and the release of a marked row
   it did not send) in one commit with the partition's next mark (`_next_round`), and
   each run is settled on the outcome path (`OutcomePath.settle`).

A paused target's probe is claimed when the round starts: planned earlier and taken
meanwhile by another partition of the pod, nothing of that target goes this round.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from jobledger.core.tasks import run_each
from jobledger.domain.job_outcomes import OutcomeLabel
from jobledger.domain.jobs import Change, Job, JobStatus
from jobledger.domain.lanes import BatchPlan
from jobledger.reactors.fast_context import FastContext
from jobledger.reactors.fast_pass import PartitionPass, leaving
from jobledger.reactors.fast_states import IDLE, IN_ROUND, LOST, READING, WorkerStatus
from jobledger.reactors.outcome import Ran
from jobledger.storage.port import LeaseGuard

logger = logging.getLogger("jobledger.fast_lane")

_OK = OutcomeLabel.OK


@dataclass(slots=True)
class _RoundWrite:
    """A round's changes besides its outcomes: the releases of marked rows it did not
    send, and what the round leaves in the pass's buffer (rows still PENDING as
    `replaced`, rows that left the queue as `dropped`)."""

    releases: list[Change]
    replaced: dict[str, Job]
    dropped: set[str]


@dataclass(slots=True)
class Unwritten:
    """What a failed round decided and did not write (`PartitionWorker._recover`)."""

    ran: list[Ran] = field(default_factory=list)
    releases: list[Change] = field(default_factory=list)


class Rounds:
    """One partition worker's rounds over its current pass (`PartitionPass`)."""

    def __init__(
        self, ctx: FastContext, status: WorkerStatus, pass_: PartitionPass, partition: int
    ) -> None:
        self.ctx = ctx
        self.status = status
        self.pass_ = pass_
        self.partition = partition
        #: the next round, its row marked in the last commit
        self.carried: tuple[BatchPlan, Job] | None = None
        self.unwritten = Unwritten()

    async def step(self) -> int | None:
        """One round: the rows it sent, or None once the pass found nothing more to send
        (or the worker may send nothing more)."""
        status = self.status
        if status.state is LOST or (status.ending and self.carried is None):
            await self.release_carried("partition lost")
            return None
        if not status.may_send():
            await self.release_carried("lease ending")
            return None
        if self.carried is not None:
            carried, marked = self.carried
            self.carried = None
            return await self._round(carried, marked)
        status.enter(READING)
        plan = await self.pass_.next_plan()
        return None if plan is None else await self._round(plan, None)

    async def handed_over(self, rows: list[Job]) -> int:
        """The one row a wake-up handed over while the worker waited: marked without
        reading the partition (`Writes.mark_first` checks what the read would have told),
        then sent. 0 when it cannot be: the pass reads as usual."""
        status, ctx = self.status, self.ctx
        if len(rows) != 1 or status.state is not IDLE or not status.may_send():
            return 0
        self.pass_.seed(rows)
        plan = self.pass_.plan()
        risky = plan.risky
        if risky is None or plan.chains:
            self.pass_.finish()
            return 0
        status.enter(IN_ROUND)
        change = ctx.mark(risky)
        if not await ctx.store.writes.mark_first(change, LeaseGuard(ctx.pod, ctx.clock.now())):
            self.pass_.finish()
            status.enter(READING)
            return 0
        row = change.row
        assert isinstance(row, Job)
        self.pass_.replace(risky, row)
        return await self._round(plan, row)

    async def release_carried(self, cause: str) -> None:
        """The next round's row was marked in the last commit and will not be sent now:
        release its mark (a deferral) so it neither holds its key nor dies "in flight"."""
        if self.carried is not None:
            _, marked = self.carried
            self.carried = None
            await self._write([], [(marked, cause)])

    def give_up(self) -> None:
        """The round failed: end the pass; a row marked for the next round is released
        by `PartitionWorker._recover` with the outcomes the round did not write."""
        self.pass_.finish()
        if self.carried is not None:
            self.unwritten.releases.append(self.ctx.unmark(self.carried[1], "round failed"))
            self.carried = None

    # --- one round -----------------------------------------------------------------------
    async def _round(self, plan: BatchPlan, marked: Job | None) -> int:
        """Mark the round's at-most-once row (unless `marked` already), send the chains,
        write the outcomes: the rows sent."""
        status = self.status
        status.enter(IN_ROUND)
        try:
            probes = self._take_probes(plan)
            risky = plan.risky
            if risky is not None and marked is None and not self._held(risky, probes):
                change = self.ctx.mark(risky)
                (ok,) = await self.ctx.committer.commit([change], [True])
                marked = await self._marked(risky, change, ok)
            if status.state is LOST:
                if marked is not None:
                    await self._write([], [(marked, "partition lost")])
                return 0
            ran = await self._send(plan, marked, probes)
            unsent: list[tuple[Job, str]] = []
            if marked is not None and all(r.job.id != marked.id for r in ran):
                # marked, not sent (its target paused, its probe taken, the lease ending):
                # its release rides in the commit of its siblings' outcomes
                lost = status.state is LOST
                unsent.append((marked, "lease ending" if lost else "target paused"))
            await self._write(ran, unsent)
            return len(ran)
        finally:
            status.enter(READING)

    def _take_probes(self, plan: BatchPlan) -> set[str]:
        """Claim the plan's probes now, each together with the decision to send it: the
        ids of the probe rows this round may send. A probe another partition of the pod
        took after this plan was made (planned while the round before committed) is not
        this round's: its target's rows are held (`_held`), a marked one is released."""
        taken = {t for t in plan.probes if self.ctx.pauses.take_probe(t)}
        rows = [c[0] for c in plan.chains if c[0].target in taken]
        if plan.risky is not None and plan.risky.target in taken:
            rows.append(plan.risky)
        return {j.id for j in rows}

    def _held(self, job: Job, probes: set[str]) -> bool:
        """`job`'s target is paused and `job` is not a probe this round claimed."""
        return self.ctx.pauses.is_paused(job.target) and job.id not in probes

    async def _marked(self, risky: Job, change: Change, ok: bool) -> Job | None:
        """The marked row, or None when the mark was refused: a refused lease guard is a
        lost partition (LOST), a row changed by someone else is never sent."""
        if ok:
            row = change.row
            assert isinstance(row, Job)
            self.pass_.replace(risky, row)
            return row
        self.ctx.stats.marks_refused += 1
        current = await self.ctx.store.admin.get_job(risky.id)
        if current is not None and current.stream_version == risky.stream_version:
            # the row is as we read it, so the lease guard refused: the partition is gone
            logger.warning(
                "partition %d: lease lost on %s (mark refused)", self.partition, self.ctx.pod
            )
            self.status.enter(LOST)
        else:
            self.pass_.drop(risky)  # closed or changed by someone else: never send it
            if current is not None and current.status == JobStatus.PENDING:
                self.pass_.requeue(current)
        return None

    async def _send(self, plan: BatchPlan, marked: Job | None, probes: set[str]) -> list[Ran]:
        """Send the round's chains concurrently (the marked row is a chain of one)."""
        coros = [self._chain(chain, probes) for chain in plan.chains]
        if marked is not None:
            coros.append(self._chain((marked,), probes))
        # one task per chain: a handler's timeouts (asyncio.timeout in aiokafka) must
        # cancel its own task, never the partition loop
        ran = [r for results in await run_each(coros) for r in results]
        self.ctx.stats.round(len(ran))
        return ran

    async def _chain(self, chain: tuple[Job, ...], probes: set[str]) -> list[Ran]:
        """Send one chain's rows in order, each judged as it ends; a row that did not
        succeed stops the later versions of its key."""
        ctx = self.ctx
        out: list[Ran] = []
        target = ctx.targets.find(chain[0].target)  # a chain is one target's key
        if target is None:
            return out
        outcomes, clock, may_send = ctx.outcomes, ctx.clock, self.status.may_send
        now = clock.now()  # then read once per row, after its run: its outcome's stamp
        for job in chain:
            # on the clock read when the row before ended (nothing waited since)
            if not may_send(now):
                break  # the lease ends (by this pod's clock) before this send could finish
            if self._held(job, probes):
                break  # paused in this round, or its probe taken: skip the rest of its batch
            run = await outcomes.run(target, job)
            now = clock.now()
            outcome = outcomes.judge(target, job, run, now)
            out.append(Ran(job, target, run, outcome))
            if outcome.label is not _OK:
                break  # a row that did not succeed stops the later versions of its key
        return out

    # --- writing a round -----------------------------------------------------------------
    async def _write(self, ran: list[Ran], unsent: Sequence[tuple[Job, str]] = ()) -> None:
        """Write the round (`_round_changes`) and mark the next one (`_next_round`) in
        one commit, then settle both."""
        ctx = self.ctx
        written = self._round_changes(ran, unsent)
        changes = [item.outcome.change for item in ran] + written.releases
        guarded = [False] * len(changes)
        plan, mark = self._next_round()
        if mark is not None:
            changes.append(mark)
            guarded.append(True)
        # nothing to run before the next page: read it while the outcomes commit
        ahead = mark is None and not self.status.ending and self.pass_.start_read_ahead(plan)
        try:
            flags = await ctx.committer.commit(changes, guarded) if changes else []
        except BaseException:
            self.pass_.abandon_read_ahead()
            self.unwritten.ran = ran  # decided, not written: the worker's recovery writes them
            self.unwritten.releases.extend(written.releases)
            raise
        lost = {item.job.id for item, ok in zip(ran, flags, strict=False) if not ok}
        for release, ok in zip(written.releases, flags[len(ran) :], strict=False):
            if not ok:  # changed by someone else (a takeover): not ours to send
                lost.add(release.stream.partition(":")[2])
        if lost:
            self.pass_.update({}, lost)
        await ctx.outcomes.settle(ran, flags[: len(ran)], ctx.pod)
        if ahead:
            await self.pass_.take_read_ahead(written.replaced, written.dropped | lost)
        if mark is not None and plan is not None and plan.risky is not None:
            marked = await self._marked(plan.risky, mark, flags[-1])
            if marked is not None:
                self.carried = (plan, marked)

    def _round_changes(self, ran: list[Ran], unsent: Sequence[tuple[Job, str]]) -> _RoundWrite:
        """Step one of writing a round: the releases of rows it marked and did not send
        (its outcomes are `ran`'s), and the pass's buffer as they all leave it."""
        replaced, dropped = leaving((item.job.id, item.outcome.change) for item in ran)
        releases = [self.ctx.unmark(job, cause) for job, cause in unsent]
        for release in releases:
            row = release.row
            assert isinstance(row, Job)
            replaced[row.id] = row
        self.pass_.update(replaced, dropped)
        return _RoundWrite(releases, replaced, dropped)

    def _next_round(self) -> tuple[BatchPlan | None, Change | None]:
        """Step two: the next round, planned over what the page has left (None when
        nothing is, or the worker is ending), and the in-flight mark of its at-most-once
        row. That mark rides in this round's commit (the carried mark), so the next
        round sends without a commit of its own first."""
        if self.status.ending or not self.pass_.buffer:
            return None, None
        plan = self.pass_.plan()
        return plan, (self.ctx.mark(plan.risky) if plan.risky is not None else None)
