"""The chaos checks: the record and the log against the promises.

`analyse` takes plain inputs (business rows, each job's trail from the log, the
recorded deliveries, the faults injected) so tests/chaos/test_checks.py can prove that
each check fails on a crafted bad input:

* nothing lost: every committed business row has its job, every succeeded job is on
  its topic, no job is still open or closed without a reason;
* at-most-once: at most one delivery; at-least-once: at least one, never DEAD;
* every at-most-once DEAD is justified: its in-flight mark was hit by a fault (a kill of
  the pod that marked it, or a fault hitting every pod) between the mark and the DEAD;
* per-key order of *every* delivery (`order_problems`);
* one job per schedule slot.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from jobledger.domain.events import Event, EventType
from jobledger.domain.timeutil import parse_iso
from jobledger.projections.log import pages
from jobledger.storage.port import Store
from tests.chaos import app as chaos_app
from tests.chaos.acks import AckIndex
from tests.chaos.record import Delivered, Recorder
from tests.chaos.summary import FaultHit, Summary

CLOSED = (
    EventType.JOB_SUCCEEDED,
    EventType.JOB_DEAD,
    EventType.JOB_SKIPPED,
    EventType.JOB_CANCELLED,
    EventType.JOB_EXPIRED,
)
MARK_SLACK = timedelta(milliseconds=500)  # a mark's `at` is taken just before its commit


@dataclass
class JobTrail:
    target: str
    key: str | None
    version: int
    dedupe_key: str
    payload: Any
    closed: str | None = None  # the closing event type
    reason: str | None = None
    enqueued_at: datetime | None = None
    marked_at: datetime | None = None  # the last in-flight mark (JobDispatched)
    marked_by: str | None = None  # its pod
    closed_at: datetime | None = None


async def read_trails(store: Store) -> tuple[dict[str, JobTrail], datetime | None]:
    """Every job's enqueue, marks and closing event, and when the schedule was declared."""
    trails: dict[str, JobTrail] = {}
    declared: datetime | None = None
    async for events in pages(store):
        for event in events:
            fold(trails, event)
            if event.type == EventType.SCHEDULE_DECLARED and declared is None:
                declared = event.at
    return trails, declared


def fold(trails: dict[str, JobTrail], event: Event) -> None:
    if not event.stream.startswith("job:"):
        return
    job_id = event.stream.removeprefix("job:")
    data = event.data
    trail = trails.get(job_id)
    if event.type == EventType.JOB_ENQUEUED:
        trails[job_id] = JobTrail(
            data["target"],
            data.get("key"),
            data.get("version", 0),
            data["dedupe_key"],
            data.get("payload"),
            enqueued_at=event.at,
        )
    elif trail is None:
        return
    elif event.type == EventType.JOB_DISPATCHED:
        trail.marked_at, trail.marked_by = event.at, data.get("pod")
    elif event.type in CLOSED:
        trail.closed, trail.reason, trail.closed_at = event.type, data.get("reason"), event.at
    elif event.type == EventType.JOB_RETRIED:
        trail.closed = trail.reason = trail.closed_at = None


def justified(trail: JobTrail, hits: Sequence[FaultHit]) -> FaultHit | None:
    """The fault that explains an at-most-once DEAD: it hit the pod holding the job's
    in-flight mark while the mark was held (between the mark and the DEAD)."""
    if trail.marked_at is None:
        return None
    until = trail.closed_at or datetime.max.replace(tzinfo=trail.marked_at.tzinfo)
    for hit in hits:
        held = hit.until >= trail.marked_at - MARK_SLACK and hit.at <= until
        if held and hit.hits(trail.marked_by):
            return hit
    return None


def analyse(
    summary: Summary,
    business: set[tuple[str, int]],
    trails: dict[str, JobTrail],
    records: list[Delivered],
    slot_window: tuple[datetime, datetime] | None,
    slot_runs: list[dict[str, Any]],
    hits: Sequence[FaultHit] = (),
    acks: AckIndex | None = None,
) -> None:
    kafka = {i: t for i, t in trails.items() if t.target.startswith("kafka:")}
    summary.jobs, summary.enqueued, summary.delivered = len(business), len(kafka), len(records)
    by_dedupe = {t.dedupe_key: i for i, t in kafka.items()}
    for key, version in sorted(business):
        if f"chaos:{key}:{version}" not in by_dedupe:
            summary.lost += 1
            summary.problem(f"lost: business row {key} v{version} committed, no JobEnqueued")
    for trail in kafka.values():
        _, bkey, bversion = trail.dedupe_key.split(":")
        if (bkey, int(bversion)) not in business:
            summary.lost += 1
            summary.problem(f"JobEnqueued {trail.dedupe_key} without its business row")
    count = Counter(r.event_id for r in records)
    for job_id, trail in kafka.items():
        check_job(summary, job_id, trail, count[job_id], hits, acks)
    if acks is not None:
        for ack in acks.unread():
            summary.acks_unread += 1
            summary.problem(
                f"acknowledged record not read: {ack.job} at"
                f" {ack.topic}/{ack.partition}@{ack.offset} (ack log, pid {ack.pid})"
            )
    for problem in order_problems(records, kafka, summary):
        summary.order_violations += 1
        summary.problem(problem)
    summary.versions_in_flight_together = in_flight_together(kafka)
    check_slots(summary, trails, slot_window, slot_runs)


def check_job(
    summary: Summary,
    job_id: str,
    trail: JobTrail,
    delivered: int,
    hits: Sequence[FaultHit],
    acks: AckIndex | None = None,
) -> None:
    amo = trail.target == chaos_app.AMO_TARGET
    if trail.closed == EventType.JOB_SUCCEEDED:
        summary.succeeded += 1
        if delivered == 0:
            summary.lost += 1
            text = f"lost: {job_id} ({trail.dedupe_key}) succeeded, not on the topic"
            if acks is not None:  # the workers' ack log says why (tests/chaos/acks.py)
                cause, detail = acks.classify_lost(job_id)
                summary.lost_causes[cause] += 1
                text += f" — {cause}: {detail}"
            summary.problem(text)
    elif trail.closed == EventType.JOB_DEAD:
        summary.dead[trail.reason or "NO REASON"] += 1
        if not trail.reason:
            summary.lost += 1
            summary.problem(f"lost: {job_id} DEAD without a reason")
        if not amo:
            summary.alo_undelivered += 1
            summary.problem(f"at-least-once {job_id} DEAD ({trail.reason})")
        elif justified(trail, hits) is not None:
            summary.dead_justified += 1
        else:
            summary.dead_unjustified += 1
            summary.problem(
                f"at-most-once {job_id} DEAD ({trail.reason}) with no fault on its mark"
                f" (marked {trail.marked_at} by {trail.marked_by})"
            )
    elif trail.closed is not None:
        summary.lost += 1
        summary.problem(f"lost: {job_id} closed by {trail.closed} ({trail.reason})")
    else:
        summary.lost += 1
        summary.problem(f"lost: {job_id} ({trail.dedupe_key}) still open after the drain")
    if amo and delivered > 1:
        summary.amo_duplicates += 1
        summary.problem(f"at-most-once {job_id} delivered {delivered}x")
    if not amo:
        summary.alo_duplicates += max(delivered - 1, 0)
        if delivered == 0 and trail.closed != EventType.JOB_DEAD:
            summary.alo_undelivered += 1


def order_problems(
    records: list[Delivered], kafka: dict[str, JobTrail], summary: Summary
) -> list[str]:
    """Per key, every delivery in the order the broker appended them (one key, one
    partition) must be

    * the next version after the key's previous delivery, skipping only versions that
      were never delivered at all (at-most-once jobs that went DEAD); or
    * a step back to a version already delivered: a resend run after a takeover (the new
      owner resends what the old one sent without recording it), which then goes on
      one version at a time — a run that jumps over a delivered version is two senders
      interleaved;
    * and a version is never delivered before an earlier version that is delivered later.
    """
    delivered_versions: dict[str, set[int]] = defaultdict(set)
    matched: list[tuple[str, int]] = []
    problems: list[str] = []
    for r in records:
        sent = kafka.get(r.event_id or "")
        if sent is None or r.key != sent.key or r.value != sent.payload:
            problems.append(f"record {r.topic}/{r.partition}@{r.offset} matches no job: {r.key}")
            continue
        key = sent.key or ""
        delivered_versions[key].add(sent.version)
        matched.append((key, sent.version))
    cursor: dict[str, int] = {}
    seen: dict[str, set[int]] = defaultdict(set)
    flagged: set[tuple[str, int]] = set()
    for key, version in matched:
        before = cursor.get(key, 0)
        ever = delivered_versions[key]
        if version <= before and version not in seen[key]:
            if (key, version) not in flagged:  # not already reported as jumped over
                problems.append(f"order: {key} v{version} first delivered after v{before}")
        elif version <= before:
            summary.resend_runs += 1
        else:
            skipped = [v for v in range(before + 1, version) if v in ever]
            if skipped:
                late = [v for v in skipped if v not in seen[key]]
                flagged.update((key, v) for v in late)
                what = f"before v{late[0]}" if late else f"over v{skipped[0]} (interleaved)"
                problems.append(f"order: {key} v{version} delivered {what} after v{before}")
        seen[key].add(version)
        cursor[key] = version
    return problems


def in_flight_together(kafka: dict[str, JobTrail]) -> int:
    """Pairs (v, v+1) of one key whose v+1 was committed before v closed, so the lane had
    both pending at once and had to hold v+1 behind v: how much the order check had to
    catch (a hot-keys workload makes this large)."""
    by_key: dict[str, dict[int, JobTrail]] = defaultdict(dict)
    for trail in kafka.values():
        by_key[trail.key or ""][trail.version] = trail
    pairs = 0
    for versions in by_key.values():
        for v, trail in versions.items():
            nxt = versions.get(v + 1)
            if nxt is None or nxt.enqueued_at is None or trail.closed_at is None:
                continue
            pairs += nxt.enqueued_at < trail.closed_at
    return pairs


def check_slots(
    summary: Summary,
    trails: dict[str, JobTrail],
    window: tuple[datetime, datetime] | None,
    runs: list[dict[str, Any]],
) -> None:
    """Exactly one job per minute slot that passed while workers ran, each closed by
    JobSucceeded (or JobSkipped with a reason)."""
    prefix = f"{chaos_app.SCHEDULE}:"
    per_slot: dict[datetime, list[JobTrail]] = defaultdict(list)
    for trail in trails.values():
        if trail.target == f"schedule:{chaos_app.SCHEDULE}":
            per_slot[parse_iso(trail.dedupe_key.removeprefix(prefix))].append(trail)
    if window is None:
        summary.slot_errors += 1
        summary.problem("the schedule was never declared")
        return
    start, end = window
    slot = start.replace(second=0, microsecond=0) + timedelta(minutes=1)
    while slot <= end:
        summary.slots += 1
        jobs = per_slot.get(slot, [])
        ok = len(jobs) == 1 and (
            jobs[0].closed == EventType.JOB_SUCCEEDED
            or (jobs[0].closed == EventType.JOB_SKIPPED and jobs[0].reason)
        )
        if not ok:
            summary.slot_errors += 1
            summary.problem(f"slot {slot.isoformat()}: {[(j.closed, j.reason) for j in jobs]}")
        slot += timedelta(minutes=1)
    summary.slot_reruns = sum(n - 1 for n in Counter(r["slot"] for r in runs).values())


def check_offsets(summary: Summary, recorder: Recorder) -> None:
    """Fail closed on an offset the recorder skipped and could not read again."""
    gaps = recorder.gaps()
    summary.offsets_unread = len(gaps)
    summary.offsets_reread = recorder.holes_filled
    for gap in gaps:
        summary.problem(f"recorder: {gap}")
