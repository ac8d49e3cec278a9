"""The slot run: whether a schedule slot's job runs or is skipped, and what it records — pure.

A slot whose FIRST run starts more than the grace after the slot is late;
`decide_slot_run` gives the verdict from the missed-slot policy (and `late_reason` says
why it is late, as far as the data tells). `slot_ran` and `slot_skipped` are the
schedule stream's record of the outcome (last_run_at / last_skipped_at).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from jobledger.domain.errors import InvalidArgument
from jobledger.domain.events import EventType
from jobledger.domain.jobs import Change, Job, Stamp
from jobledger.domain.schedules.changes import schedule_change
from jobledger.domain.schedules.row import MissedSlotPolicy, Schedule
from jobledger.domain.timeutil import at_ms, iso, parse_iso


def slot_of(job: Job) -> datetime:
    payload = job.payload
    if not isinstance(payload, Mapping) or not isinstance(payload.get("slot"), str):
        raise InvalidArgument(f"job {job.id} is not a schedule slot (payload has no slot)")
    return parse_iso(payload["slot"])


@dataclass(frozen=True, slots=True)
class SlotVerdict:
    run: bool
    reason: str | None = (
        None  # reason code when skipped: late_enqueued | previous_slot_running | not_started
    )
    detail: str | None = None

    @property
    def skip_text(self) -> str:
        return f"late: {self.detail}" if self.detail else "late"


def late_reason(
    row: Schedule | None, job: Job, slot: datetime, now: datetime, grace: timedelta
) -> tuple[str, str]:
    """Why a slot's first run starts late, as far as the data tells."""
    deadline = slot + grace
    late_s = (now - slot).total_seconds()
    if job.created_at > deadline:
        after = (job.created_at - slot).total_seconds()
        return "late_enqueued", (
            f"slot {iso(slot)} was enqueued {after:.0f} s after it: no pod ticked in time"
            " (pods down or workers off)"
        )
    finished = row.last_finished_at if row else None
    if finished is not None and finished > deadline:
        ran_for = (finished - slot).total_seconds()
        return "previous_slot_running", (
            f"slot {iso(slot)} starts {late_s:.0f} s late: the previous slot ran until"
            f" {iso(finished)} ({ran_for:.0f} s after this slot)"
        )
    return "not_started", (
        f"slot {iso(slot)} starts {late_s:.0f} s late: no long-lane worker took it in time"
        " (pods down, workers off or the long lane busy)"
    )


def needs_newer_slot_check(
    policy: MissedSlotPolicy, job: Job, now: datetime, *, grace: timedelta
) -> bool:
    """Whether `decide_slot_run` needs to know if a newer PENDING slot exists (only a
    late first run under run_once does), so the adapter reads the queue only then."""
    return (
        policy == MissedSlotPolicy.RUN_ONCE
        and job.attempts == 0
        and at_ms(now) - slot_of(job) > grace
    )


def decide_slot_run(
    row: Schedule | None,
    policy: MissedSlotPolicy,
    job: Job,
    now: datetime,
    *,
    grace: timedelta,
    newer_pending: bool,
) -> SlotVerdict:
    """The verdict on a slot whose FIRST run starts more than `grace` after the slot.

    skip → skipped; run_once → skipped only when a newer PENDING slot of the code
    exists, otherwise run. Retries inside a slot (attempts > 0) always run.
    """
    slot = slot_of(job)
    if job.attempts > 0 or at_ms(now) - slot <= grace:
        return SlotVerdict(True)
    reason, detail = late_reason(row, job, slot, at_ms(now), grace)
    if policy == MissedSlotPolicy.SKIP:
        return SlotVerdict(False, reason, detail)
    if newer_pending:
        return SlotVerdict(False, "newer_slot_pending", f"{detail}; a newer slot is pending")
    return SlotVerdict(True)


def slot_ran(row: Schedule, job: Job, stamp: Stamp) -> Change:
    """The slot's handler returned: last_run_at = max(last_run_at, slot)."""
    # the runs of the slot's job, the one that returned included
    data = {"slot": iso(slot_of(job)), "job_id": job.id, "attempts": job.attempts + 1}
    return schedule_change(row, row.stream, stamp, (EventType.SCHEDULE_SLOT_RAN, data))


def slot_skipped(row: Schedule, job: Job, verdict: SlotVerdict, stamp: Stamp) -> Change:
    """The slot was skipped at run time: last_skipped_at = max(last_skipped_at, slot)."""
    data = {
        "slot": iso(slot_of(job)),
        "stage": "run",
        "job_id": job.id,
        "reason": verdict.reason,
        "detail": verdict.skip_text,
    }
    return schedule_change(row, row.stream, stamp, (EventType.SCHEDULE_SLOT_SKIPPED, data))
