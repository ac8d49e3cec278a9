"""What a partition worker and its pass use of the fast lane: `FastContext`.

The lane (`fast_lane.FastLane`) builds one and hands it to every `PartitionWorker` it
starts; the worker and its pass (`fast_pass.PartitionPass`) see the lane only through
it. It holds the store, the clock, the settings, the pod's id, the registered targets,
the outcome path with its pause map, the group commit, the cap on page reads at once
and the lane's counters, and it does what the lane decides about rows: a target's view
for the planner, a row's in-flight mark and its release, and the judgement of rows a
run left in flight (`take_over`: when a partition is acquired, and when its worker
recovers from a failed round).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from jobledger.core.ids import new_token
from jobledger.domain import job_commands, job_outcomes
from jobledger.domain.events import SYSTEM
from jobledger.domain.job_outcomes import Outcome
from jobledger.domain.jobs import Change, Job, Lane, Stamp
from jobledger.domain.lanes import TargetView
from jobledger.reactors.commit import GroupCommitter
from jobledger.reactors.outcome import OutcomePath
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


class FastContext:
    """The parts of the pod's fast lane its partition workers share."""

    def __init__(
        self, engine: Engine, pod: str, outcomes: OutcomePath, committer: GroupCommitter
    ) -> None:
        self.store = engine.store
        self.clock = engine.clock
        self.settings = engine.settings
        self.targets = engine.targets
        self.observers = engine.observers
        self.pod = pod
        self.outcomes = outcomes
        self.pauses = outcomes.pauses
        self.committer = committer
        self.stats = LaneStats()
        self.reads = asyncio.Semaphore(PAGE_READS_AT_ONCE)

    def view(self, name: str) -> TargetView | None:
        """What the planner needs to know of target `name` now; None when it is not a
        fast-lane target of this pod."""
        target = self.targets.find(name)
        if target is None or target.lane != Lane.FAST:
            return None
        return self.pauses.view(target)

    def mark(self, job: Job) -> Change:
        """The in-flight mark of an at-most-once row, written before its send."""
        stamp = Stamp(self.clock.now(), SYSTEM, job.trace_id)
        return job_commands.dispatch(job, token=new_token(), pod=self.pod, stamp=stamp)

    def unmark(self, job: Job, cause: str) -> Change:
        """Release the mark of a row that was marked and then not sent."""
        logger.info("partition %d: job %s marked, not sent (%s)", job.partition, job.id, cause)
        return job_commands.unmark(job, Stamp(self.clock.now(), SYSTEM, job.trace_id), cause)

    async def take_over(self, partitions: Sequence[int]) -> None:
        """Judge the rows left in flight in `partitions` (by a previous owner, or by a
        round of this pod that failed): at-most-once → DEAD, at-least-once → requeued.
        One read and one lease-guarded write for all of them."""
        await self.judge_marked(await self.store.queue.inflight_in(partitions))

    async def judge_marked(self, rows: Sequence[Job]) -> list[tuple[Job, Outcome, bool]]:
        """Judge `rows`, marked in flight by a run that is over, as a takeover does, in one
        lease-guarded write: each row, its outcome and whether it was applied."""
        return await self.outcomes.judge_left_behind(
            rows,
            job_outcomes.take_over,
            "in flight when its partition was taken over",
            guard=LeaseGuard(self.pod, self.clock.now()),
        )
