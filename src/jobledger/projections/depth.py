"""Queue depth over time, sampled by the stats projection (the dashboard's depth chart).

The stats fold keeps the open counters (`state["open"]`, per target, code and status).
Each time a job event moves a job between statuses, the depth of its target *after*
the event is written into the current minute and hour sample; a sample made for a new
minute or hour starts as a copy of every target's depth at that moment. So a sample
holds each target's depth at the end of its minute (hour), `[PENDING, RUNNING, DEAD]`:

    state["depth"] = {"minutes": {"2026-03-02T09:41Z": {target: [3, 1, 0]}},
                      "hours":   {"2026-03-02T09:00Z": {target: [3, 1, 0]}}}

A minute without a sample had no status change: its depth is the previous sample's.
Events that arrive with an older time than the newest sample (times are not strictly
ordered in the log) count toward the newest sample. **Bounded**: at most `keep_minutes`
minute and `keep_hours` hour samples, each one list of three per target; never per job.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

STATUSES = ("PENDING", "RUNNING", "DEAD")
KEEP_MINUTES = 120
KEEP_HOURS = 24 * 7


def initial() -> dict[str, Any]:
    return {"depth": {"minutes": {}, "hours": {}}}


def target_depth(open_jobs: Mapping[str, Any], target: str) -> list[int]:
    """[PENDING, RUNNING, DEAD] of `target` from the stats projection's open counters."""
    codes = open_jobs.get(target, {})
    return [sum(counts.get(status, 0) for counts in codes.values()) for status in STATUSES]


def _time(bucket: str) -> datetime:
    return datetime.fromisoformat(bucket.replace("Z", "+00:00"))


def _sample(
    samples: dict[str, Any], name: str, keep: timedelta, open_jobs: Mapping[str, Any]
) -> dict[str, list[int]]:
    """The sample to write: `name`'s, or the newest when `name` is older than it."""
    newest = max(samples, default=None)
    if newest is not None and name <= newest:
        found: dict[str, list[int]] = samples[newest]
        return found
    fresh = {target: target_depth(open_jobs, target) for target in open_jobs}
    samples[name] = fresh
    cutoff = _time(name) - keep
    for old in [b for b in samples if _time(b) <= cutoff]:
        del samples[old]
    return fresh


def record_depth(
    state: dict[str, Any],
    target: str,
    minute: str,
    hour: str,
    *,
    keep_minutes: int = KEEP_MINUTES,
    keep_hours: int = KEEP_HOURS,
) -> None:
    """After `target`'s open counters changed (event in `minute` / `hour`): its depth
    now, in the current samples."""
    depth = state["depth"]
    now = target_depth(state["open"], target)
    for samples, name, keep in (
        (depth["minutes"], minute, timedelta(minutes=keep_minutes)),
        (depth["hours"], hour, timedelta(hours=keep_hours)),
    ):
        _sample(samples, name, keep, state["open"])[target] = now
