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

from datetime import datetime, timedelta
from typing import Any

STATUSES = ("PENDING", "RUNNING", "DEAD")
_INDEX = {status: n for n, status in enumerate(STATUSES)}
KEEP_MINUTES = 120
KEEP_HOURS = 24 * 7


def initial() -> dict[str, Any]:
    return {
        "depth": {
            "minutes": {},
            "hours": {},
            "now": {},  # target -> [PENDING, RUNNING, DEAD] (targets with open jobs)
            "newest": {"minutes": None, "hours": None},
        }
    }


def _time(bucket: str) -> datetime:
    return datetime.fromisoformat(bucket.replace("Z", "+00:00"))


def _sample(depth: dict[str, Any], kind: str, name: str, keep_s: int) -> dict[str, list[int]]:
    """The sample to write: `name`'s, or the newest when `name` is older than it."""
    samples: dict[str, Any] = depth[kind]
    newest: str | None = depth["newest"][kind]
    if newest is not None and name <= newest:
        found: dict[str, list[int]] = samples[newest]
        return found
    fresh = {target: list(counts) for target, counts in depth["now"].items()}
    samples[name] = fresh
    depth["newest"][kind] = name
    cutoff = _time(name) - timedelta(seconds=keep_s)
    for old in [b for b in samples if _time(b) <= cutoff]:
        del samples[old]
    return fresh


def record_depth(
    state: dict[str, Any],
    target: str,
    before: str,
    after: str,
    minute: str,
    *,
    keep_minutes: int = KEEP_MINUTES,
    keep_hours: int = KEEP_HOURS,
) -> None:
    """A job of `target` moved from status `before` to `after` (any of them may be
    outside PENDING, RUNNING, DEAD: new, gone, unknown) by an event in `minute` (a bucket
    name like `2026-03-02T09:41Z`): its depth now, in the current minute and hour
    samples. The target's depth is kept as it goes, O(1) per event."""
    depth = state["depth"]
    counts = depth["now"].setdefault(target, [0, 0, 0])
    if before in _INDEX:
        counts[_INDEX[before]] -= 1
    if after in _INDEX:
        counts[_INDEX[after]] += 1
    if not any(counts):
        del depth["now"][target]
    _sample(depth, "minutes", minute, 60 * keep_minutes)[target] = list(counts)
    _sample(depth, "hours", minute[:14] + "00Z", 3600 * keep_hours)[target] = list(counts)
