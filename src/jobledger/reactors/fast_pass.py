"""One pass of a partition worker over its PENDING rows: paging and planning.

A pass reads the partition's PENDING rows in pages (`store.queue.fast_pending`, keyset paging
on the order key, ≤ `fast_batch`), keeps what is still to run in a buffer sorted by
(key, version), and asks the pure planner (`domain.lanes.plan_batch`) for each round.
A full page may cut its last key short: `domain.lanes.next_page_after` re-reads that key
from its first remaining version. The pass also collects when it must look again (the
earliest held retry) and which paused targets have rows here (their probes), and it
judges, as a takeover does, a row of its pages left marked in flight by a run that is
over and that no takeover judged (`_judge_marked`).

Three speed paths live here, each measured (docs/decisions.md, D25, D27, D28):

* the read-ahead: when a round leaves nothing in the buffer to run and its page was
  full, the next page's position is known before the round's outcomes commit, so the
  worker reads it while they do (`start_read_ahead`). That read may see the round's own
  rows as they were before the commit: `take_read_ahead` puts them in the state the
  commit left them in (a row that left the queue, or whose outcome lost its
  compare-and-set, is dropped), so the page is the one a read after the commit would
  have returned;
* the prefix plan (`_plan_prefix`): an at-most-once round sends one row, so it is
  planned on the first rows of the buffer before the whole of it;
* the in-place update (`update`): a round that changed a few rows edits the buffer
  where they are instead of rebuilding it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from datetime import datetime

from jobledger.domain.jobs import Change, DeliveryMode, Job, JobStatus
from jobledger.domain.lanes import BatchPlan, TargetView, next_page_after, plan_batch
from jobledger.reactors.fast_context import FastContext

logger = logging.getLogger("jobledger.fast_lane")

#: prefixes of the buffer an at-most-once round plans on before the whole buffer
_PREFIXES = (4, 32)
#: a read-ahead is skipped when more than 1/_AHEAD_AGAIN of its page would be rows of
#: the page before (the versions of a key cut short at its end; 1 row with distinct keys)
_AHEAD_AGAIN = 10
#: `update` of more rows than this rebuilds the buffer instead of editing it in place
_FEW_CHANGED = 8


def leaving(ended: Iterable[tuple[str, Change]]) -> tuple[dict[str, Job], set[str]]:
    """How rows whose outcome is decided leave a pass's buffer (`PartitionPass.update`),
    each id with its change: a row still PENDING (a retry, a requeue) is replaced by it,
    any other is dropped."""
    replaced: dict[str, Job] = {}
    dropped: set[str] = set()
    for job_id, change in ended:
        row = change.row
        if isinstance(row, Job) and row.status == JobStatus.PENDING:
            replaced[job_id] = row
        else:
            dropped.add(job_id)
    return replaced, dropped


class PartitionPass:
    """The paging and planning state of one partition worker's current pass."""

    def __init__(self, ctx: FastContext, partition: int) -> None:
        self.ctx = ctx
        self.partition = partition
        self.buffer: list[Job] = []
        self._targets: set[str] = set()  # the page's targets (rows that left keep theirs)
        self._page: list[Job] = []
        self._after: str | None = None
        self._page_start: str | None = None
        self._page_full = False
        self._need_read = True
        self._open = False
        self._ahead: asyncio.Task[list[Job]] | None = None  # the next page, being read
        self._ahead_after: str | None = None  # where it starts
        self.wake_at: datetime | None = None
        self.paused_seen: set[str] = set()
        self._judged: set[str] = set()  # marked rows met and judged in this pass

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
        self.abandon_read_ahead()
        self._reset()
        self._open = False
        self._judged = set()

    def seed(self, rows: list[Job]) -> None:
        """Start a pass on `rows` a wake-up handed over instead of a read: its only page,
        not full, so the pass ends when they are done (the next one reads). Only a mark
        through `Writes.mark_first` may send from it (`PartitionWorker._handed_over_round`)."""
        self.finish()
        self._open = True
        self.wake_at = None
        self.paused_seen = set()
        self._page = list(rows)
        self.buffer = sorted(rows, key=lambda j: (j.order_key, j.version, j.id))
        self._targets = {job.target for job in rows}
        self._need_read = False

    async def next_plan(self) -> BatchPlan | None:
        """The next round with something to send, or None once the pass is over."""
        while True:
            if self._need_read:
                if not self._open:
                    self._open = True
                    self.wake_at = None
                    self.paused_seen = set()
                page = await self.read_page(self._after)
                if not self._take_page(page, page, self._after):
                    return None
                await self._judge_marked()
            plan = self.plan()
            if plan.size:
                return plan
            if not self._page_full:
                self.finish()
                return None
            self._after = next_page_after(self._page_start, self._page, self.buffer)
            self.buffer = []
            self._need_read = True

    async def read_page(self, after: str | None) -> list[Job]:
        """The partition's PENDING rows after keyset position `after` (one page); no
        more than `FastContext.reads` of the lane's page reads at once, so a commit never
        waits for a pooled connection behind them."""
        ctx = self.ctx
        async with ctx.reads:
            return await ctx.store.queue.fast_pending(
                self.partition, after_key=after, limit=ctx.settings.fast_batch
            )

    def _take_page(self, page: list[Job], rows: list[Job], after: str | None) -> bool:
        """Make `page`, read after `after`, the pass's current page, its `rows` (the page
        as it stands now) the buffer; False when it is empty: the pass is over."""
        ctx = self.ctx
        ctx.stats.page(len(page))
        if not page:
            self.finish()
            return False
        self._after = after
        self._page_start = after
        self._page_full = len(page) >= ctx.settings.fast_batch
        self._page = page
        self.buffer = rows if rows is not page else list(page)
        self._targets = {job.target for job in page}
        self._need_read = False
        return True

    def start_read_ahead(self, plan: BatchPlan | None) -> bool:
        """Start reading the next page now, when that is the pass's next step: the
        buffer has nothing to run in the next round (`plan`, None for an empty buffer)
        and the page was full. False when the next step is not a read."""
        if (plan is not None and plan.size) or self._need_read or not self._page_full:
            return False
        after = next_page_after(self._page_start, self._page, self.buffer)
        again = sum(1 for job in self._page if after is None or job.order_key > after)
        if again > len(self._page) // _AHEAD_AGAIN:
            # the next page starts inside this one (a key cut short at its end): read
            # early, it would return the rows of the round still uncommitted, again
            return False
        self._ahead_after = after
        self._ahead = asyncio.get_running_loop().create_task(self.read_page(after))
        return True

    def abandon_read_ahead(self) -> None:
        """Give the read-ahead up: cancel it, or collect what it raised (never unseen)."""
        task, self._ahead = self._ahead, None
        if task is None:
            return
        if not task.done():
            task.cancel()
        elif not task.cancelled():
            task.exception()

    async def take_read_ahead(self, replaced: Mapping[str, Job], gone: set[str]) -> None:
        """The page read ahead, once the round's commit is done, with the round's rows
        as the commit left them (`replaced`: still open, now this row; `gone`: left the
        queue, or lost to another writer): the read may have seen them before the
        commit. A failed read is left to `next_plan`: it reads the page again."""
        task = self._ahead
        if task is None:
            return
        try:
            page = await task
        except asyncio.CancelledError:
            self.abandon_read_ahead()
            raise
        except Exception:
            self._ahead = None
            logger.warning("partition %d: reading ahead failed", self.partition, exc_info=True)
            return
        self._ahead = None
        rows: list[Job] = []
        for job in page:
            if job.id in gone:
                continue
            rows.append(replaced.get(job.id, job))
        if self._take_page(page, rows, self._ahead_after):
            await self._judge_marked()

    async def _judge_marked(self) -> None:
        """Judge the rows of the page just taken that carry an in-flight mark, as a
        takeover does (at-most-once → DEAD), once each in a pass. A page is read only
        while the worker holds no mark of its own (a round's marked row is written
        before the next read; a page read ahead is taken as that write left it), so a
        marked row here was left by a run that is over, and a takeover judges those it
        finds named (`Queue.inflight_in`) before the worker starts: this judges any
        other. The planner holds a marked row's chain meanwhile; a row whose judgement
        was refused (the lease lost) stays held."""
        marked = [
            j for j in self.buffer if j.inflight_token is not None and j.id not in self._judged
        ]
        if not marked:
            return
        self._judged.update(j.id for j in marked)
        judged = await self.ctx.judge_marked(marked)
        self.update(
            *leaving((job.id, outcome.change) for job, outcome, applied in judged if applied)
        )

    def plan(self) -> BatchPlan:
        """The planner's next round over the buffer as it is now."""
        ctx = self.ctx
        views: dict[str, TargetView] = {}
        for name in self._targets:  # the page's targets: rows that left only add a view
            view = ctx.view(name)
            if view is not None:
                views[name] = view
        now = ctx.clock.now()
        plan = self._plan_prefix(now, views) or plan_batch(self.buffer, now, views)
        if plan.wake_at is not None and (self.wake_at is None or plan.wake_at < self.wake_at):
            self.wake_at = plan.wake_at
        self.paused_seen |= plan.paused_seen
        return plan

    def _plan_prefix(self, now: datetime, views: dict[str, TargetView]) -> BatchPlan | None:
        """The prefix plan: with only at-most-once targets a round sends the first
        runnable row, so plan on the first `_PREFIXES` rows of the (key, version)-sorted
        buffer before the whole of it — every earlier version of a row's key is before
        it. Planning the whole buffer every round is O(rows²) per page. None when the
        prefixes hold nothing runnable (or a target is at-least-once)."""
        if not all(v.mode == DeliveryMode.AT_MOST_ONCE for v in views.values()):
            return None
        for size in _PREFIXES:
            if len(self.buffer) <= size:
                return None
            head = plan_batch(self.buffer[:size], now, views)
            if head.size:
                return BatchPlan(
                    head.chains, head.risky, head.probes, True, head.wake_at, head.paused_seen
                )
        return None

    def requeue(self, current: Job) -> None:
        """Put back a row of this buffer as the store has it now (its target is known)."""
        self.buffer.append(current)
        self.buffer.sort(key=lambda j: (j.order_key, j.version, j.id))

    def replace(self, old: Job, new: Job) -> None:
        self.update({old.id: new}, set())

    def drop(self, old: Job) -> None:
        self.update({}, {old.id})

    def update(self, replaced: dict[str, Job], dropped: set[str]) -> None:
        """Rows that changed, rows that left. The in-place update: a few rows (an
        at-most-once round touches one, usually near the front) are edited where they
        are, in a walk that stops once all were found; more are one rebuild of the list."""
        left = len(replaced) + len(dropped)
        if left > _FEW_CHANGED:
            self.buffer = [replaced.get(j.id, j) for j in self.buffer if j.id not in dropped]
            return
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
