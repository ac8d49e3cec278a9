"""One pass of a partition worker over its PENDING rows: paging and planning.

A pass reads the partition's PENDING rows in pages (`store.fast_pending`, keyset paging
on the order key, ≤ `fast_batch`), keeps what is still to run in a buffer sorted by
(key, version), and asks the pure planner (`domain.lanes.plan_batch`) for each round.
A full page may cut its last key short: `domain.lanes.next_page_after` re-reads that key
from its first remaining version. The pass also collects when it must look again (the
earliest held retry) and which paused targets have rows here (their probes).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from jobledger.domain.jobs import DeliveryMode, Job
from jobledger.domain.lanes import BatchPlan, TargetView, next_page_after, plan_batch

if TYPE_CHECKING:
    from jobledger.reactors.fast_lane import FastLane

#: prefixes of the buffer an at-most-once round plans on before the whole buffer
_PREFIXES = (4, 32)


class PartitionPass:
    """The paging and planning state of one partition worker's current pass."""

    def __init__(self, lane: FastLane, partition: int) -> None:
        self.lane = lane
        self.partition = partition
        self.buffer: list[Job] = []
        self._targets: set[str] = set()  # the page's targets (rows that left keep theirs)
        self._page: list[Job] = []
        self._after: str | None = None
        self._page_start: str | None = None
        self._page_full = False
        self._need_read = True
        self._open = False
        self.wake_at: datetime | None = None
        self.paused_seen: set[str] = set()

    def _reset(self) -> None:
        self.buffer = []
        self._targets = set()
        self._page = []
        self._after = None
        self._page_start = None
        self._page_full = False
        self._need_read = True

    def finish(self) -> None:
        """End the pass: the next plan starts from the partition's first page."""
        self._reset()
        self._open = False

    async def next_plan(self) -> BatchPlan | None:
        """The next round with something to send, or None once the pass is over."""
        lane = self.lane
        while True:
            if self._need_read:
                if not self._open:
                    self._open = True
                    self.wake_at = None
                    self.paused_seen = set()
                page = await lane.store.fast_pending(
                    self.partition, after_key=self._after, limit=lane.settings.fast_batch
                )
                lane.stats.page(len(page))
                if not page:
                    self.finish()
                    return None
                self._page_start = self._after
                self._page_full = len(page) >= lane.settings.fast_batch
                self._page = page
                self.buffer = list(page)
                self._targets = {job.target for job in page}
                self._need_read = False
            plan = self.plan()
            if plan.size:
                return plan
            if not self._page_full:
                self.finish()
                return None
            self._after = next_page_after(self._page_start, self._page, self.buffer)
            self.buffer = []
            self._need_read = True

    def plan(self) -> BatchPlan:
        """The planner's next round over the buffer as it is now."""
        lane = self.lane
        views: dict[str, TargetView] = {}
        for name in self._targets:  # the page's targets: rows that left only add a view
            view = lane.view(name)
            if view is not None:
                views[name] = view
        now = lane.clock.now()
        plan: BatchPlan | None = None
        if all(v.mode == DeliveryMode.AT_MOST_ONCE for v in views.values()):
            # Only at-most-once rows: a round takes the first runnable row, so plan on a
            # prefix of the (key, version)-sorted buffer first — every earlier version of
            # a row's key is in it. Planning the whole buffer each round was O(rows²) per
            # page. Nothing runnable in the prefixes: plan the whole buffer.
            for size in _PREFIXES:
                if len(self.buffer) <= size:
                    break
                head = plan_batch(self.buffer[:size], now, views)
                if head.size:
                    plan = BatchPlan(
                        head.chains, head.risky, head.probes, True, head.wake_at, head.paused_seen
                    )
                    break
        if plan is None:
            plan = plan_batch(self.buffer, now, views)
        if plan.wake_at is not None and (self.wake_at is None or plan.wake_at < self.wake_at):
            self.wake_at = plan.wake_at
        self.paused_seen |= plan.paused_seen
        return plan

    def requeue(self, current: Job) -> None:
        """Put back a row of this buffer as the store has it now (its target is known)."""
        self.buffer.append(current)
        self.buffer.sort(key=lambda j: (j.order_key, j.version, j.id))

    def replace(self, old: Job, new: Job) -> None:
        self.update({old.id: new}, set())

    def drop(self, old: Job) -> None:
        self.update({}, {old.id})

    def update(self, replaced: dict[str, Job], dropped: set[str]) -> None:
        """Rows that changed, rows that left, in one pass over the buffer that stops once
        all were found (an at-most-once round touches one row, usually near the front)."""
        left = len(replaced) + len(dropped)
        buffer = self.buffer
        i = 0
        while left and i < len(buffer):
            job_id = buffer[i].id
            if job_id in dropped:
                del buffer[i]
                left -= 1
                continue
            new = replaced.get(job_id)
            if new is not None:
                buffer[i] = new
                left -= 1
            i += 1
