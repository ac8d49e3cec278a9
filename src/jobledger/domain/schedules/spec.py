"""What code declares about a schedule: `ScheduleSpec` and its validation — pure.

A spec is the code-owned part of a schedule row (`CODE_OWNED`): boot declares it the
first time (`schedules.declared`) and rewrites it when code changed (`schedules.synced`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from jobledger.domain.enqueue_rules import MAX_TEXT_BYTES
from jobledger.domain.errors import InvalidArgument
from jobledger.domain.schedules import cron as cronlib
from jobledger.domain.schedules.row import MissedSlotPolicy

#: the longest schedule code: `<code>:<slot ISO, 24 characters>` is a slot job's dedupe
#: key, which must fit enqueue's size limit like every other (the tick writes it directly)
MAX_CODE_BYTES = MAX_TEXT_BYTES - len(":2026-03-02T09:00:00.000Z")

#: the row fields code owns: boot sync rewrites them when the declaration differs
CODE_OWNED = ("cron", "timezone", "missed_slot_policy", "runs_per_slot")


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """A schedule as code declares it (the code-owned part of the row)."""

    code: str
    cron: str
    timezone: str
    missed_slot_policy: MissedSlotPolicy
    runs_per_slot: int


def default_policy(cron: str, tz: str, skip_max_interval: timedelta) -> MissedSlotPolicy:
    """skip when the cron's interval is `skip_max_interval` (5 min) or less, else run_once."""
    if cronlib.interval(cron, tz) <= skip_max_interval:
        return MissedSlotPolicy.SKIP
    return MissedSlotPolicy.RUN_ONCE


def make_spec(
    code: str,
    cron: str,
    *,
    timezone: str,
    missed_slot_policy: MissedSlotPolicy | str | None,
    runs_per_slot: int,
    now: datetime,
    skip_max_interval: timedelta,
) -> ScheduleSpec:
    """Validate a declaration: InvalidCron for a bad cron, InvalidArgument for the rest."""
    if not isinstance(code, str) or not code or code != code.strip() or ":" in code:
        raise InvalidArgument(f"schedule code {code!r} must be a non-empty name without ':'")
    if len(code.encode("utf-8", "surrogatepass")) > MAX_CODE_BYTES:
        raise InvalidArgument(
            f"schedule code {code[:40]!r}… is over {MAX_CODE_BYTES} bytes: its slots' dedupe"
            f" keys (<code>:<slot>) would pass enqueue's {MAX_TEXT_BYTES}-byte limit"
        )
    cronlib.zone(timezone)
    text = cronlib.validate(cron, timezone, now)
    if missed_slot_policy is None:
        policy = default_policy(text, timezone, skip_max_interval)
    else:
        try:
            policy = MissedSlotPolicy(missed_slot_policy)
        except ValueError as exc:
            raise InvalidArgument(
                f"missed_slot_policy {missed_slot_policy!r}: expected run_once or skip"
            ) from exc
    if not isinstance(runs_per_slot, int) or isinstance(runs_per_slot, bool) or runs_per_slot < 1:
        raise InvalidArgument(f"runs_per_slot for {code!r} must be an integer >= 1")
    return ScheduleSpec(code, text, timezone, policy, runs_per_slot)
