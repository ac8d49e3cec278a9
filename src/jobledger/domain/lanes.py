"""Pure lane decisions: which fast-lane rows go in a batch, which long rows to reserve.

No I/O and no clock here: the lanes read rows and the pause state, call these functions
with `now`, and carry out the plan. The rules:

* rows run in key + version order; a *chain* is the rows of one (target, key);
* a chain whose head waits for a retry (`next_run_at` in the future) holds every later
  version; a DEAD row is not PENDING, so it is never read and holds nothing;
* a row carrying another run's in-flight mark holds its chain (takeover judges it);
* rows of a paused target are skipped, except one probe row when its probe is due;
* at most one at-most-once row per partition is at risk (in flight) at a time;
* long lane: at most one RUNNING row per exclusive code, across pods and in one batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from jobledger.domain.jobs import DeliveryMode, Job, JobStatus
from jobledger.domain.records import fast_init


@fast_init
@dataclass(frozen=True, slots=True)
class TargetView:
    """What the planner needs to know about one target on this pod right now."""

    mode: DeliveryMode
    paused: bool = False
    probe_due: bool = False  # paused, and its probe may let one row through now
    exclusive: bool = False


@fast_init
@dataclass(frozen=True, slots=True)
class BatchPlan:
    """One round of one partition.

    `chains` run concurrently, the rows of a chain strictly in order, each chain
    stopping at its first row that does not succeed. `risky` is the one at-most-once
    row of the round (its in-flight mark is written before it is sent). `probes` are
    the paused targets whose probe this plan spends.
    """

    chains: tuple[tuple[Job, ...], ...] = ()
    risky: Job | None = None
    probes: frozenset[str] = frozenset()
    more: bool = False  # runnable rows were left for the next round (at-most-once cap)
    wake_at: datetime | None = None  # earliest future next_run_at of a held chain head
    paused_seen: frozenset[str] = frozenset()  # paused targets that have rows here

    @property
    def size(self) -> int:
        return sum(len(c) for c in self.chains) + (1 if self.risky is not None else 0)


def chain_id(job: Job) -> tuple[str, str]:
    return (job.target, job.order_key)


def _chains(rows: Sequence[Job]) -> list[list[Job]]:
    """Rows grouped by (target, key), each group in (version, id) order, groups in the
    order their first row appears (the store's key order)."""
    groups: dict[tuple[str, str], list[Job]] = {}
    for row in rows:
        key = chain_id(row)
        group = groups.get(key)
        if group is None:
            groups[key] = [row]
        else:
            group.append(row)
    chains = list(groups.values())
    for group in chains:
        if len(group) > 1:
            group.sort(key=_version_order)
    return chains


def _version_order(job: Job) -> tuple[int, str]:
    return (job.version, job.id)


def plan_batch(
    rows: Sequence[Job],
    now: datetime,
    targets: Mapping[str, TargetView],
    *,
    risk_free: bool = True,
) -> BatchPlan:
    """The next round for one partition from its buffered PENDING rows.

    `risk_free` False means an at-most-once row of this partition is still in flight,
    so no other may start. Rows of targets unknown to this pod are left alone.
    """
    chains: list[tuple[Job, ...]] = []
    risky: Job | None = None
    probes: set[str] = set()
    paused_seen: set[str] = set()
    more = False
    wake_at: datetime | None = None
    for group in _chains(rows):
        view = targets.get(group[0].target)
        if view is None:
            continue
        runnable: list[Job] = []
        for row in group:
            if row.status != JobStatus.PENDING or row.inflight_token is not None:
                break  # in flight under another run: the chain waits for its judgement
            if row.next_run_at > now:
                if not runnable and (wake_at is None or row.next_run_at < wake_at):
                    wake_at = row.next_run_at
                break  # waiting for a retry: later versions are held
            runnable.append(row)
        if not runnable:
            continue
        target = group[0].target
        if view.paused:
            paused_seen.add(target)
            if not view.probe_due or target in probes:
                continue
            runnable = runnable[:1]  # one probe row per probe interval
        if view.mode == DeliveryMode.AT_MOST_ONCE:
            if risky is not None or not risk_free:
                more = True
                continue
            risky = runnable[0]
            more = more or len(runnable) > 1
        else:
            chains.append(tuple(runnable))
        if view.paused:
            probes.add(target)
    return BatchPlan(tuple(chains), risky, frozenset(probes), more, wake_at, frozenset(paused_seen))


def next_page_after(
    page_start: str | None, page: Sequence[Job], remaining: Sequence[Job]
) -> str | None:
    """Keyset position of the next page once nothing in this one can run any more.

    A full page may have cut its last key short. When rows of that key are still
    buffered (held, paused), the whole key is waiting and the next page starts after
    it. When they all ran, the next page starts after the key before it, so the cut
    versions come next (rows that ran have left the queue).
    """
    if not page:
        return page_start
    last = page[-1].order_key
    if any(j.order_key == last for j in remaining):
        return last
    before = [j.order_key for j in page if j.order_key < last]
    return max(before) if before else page_start


def pick_long(
    candidates: Sequence[Job],
    now: datetime,
    targets: Mapping[str, TargetView],
    running_codes: set[str],
    limit: int,
) -> list[Job]:
    """Long-lane rows to reserve under one claim token.

    Skips targets unknown here and paused targets (one probe row when due), exclusive
    codes that already have a live RUNNING row, and a second row of one exclusive code.
    """
    picked: list[Job] = []
    codes = set(running_codes)
    probes: set[str] = set()
    for job in candidates:
        if len(picked) >= limit:
            break
        view = targets.get(job.target)
        if view is None:
            continue
        if job.status == JobStatus.PENDING and job.next_run_at > now:
            continue
        if job.status == JobStatus.RUNNING and (job.lease_until is None or job.lease_until > now):
            continue
        if view.paused:
            if not view.probe_due or job.target in probes:
                continue
            probes.add(job.target)
        if view.exclusive:
            if job.code in codes:
                continue
            codes.add(job.code)
        picked.append(job)
    return picked
