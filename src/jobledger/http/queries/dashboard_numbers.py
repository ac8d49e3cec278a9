"""The stats dashboard's numbers (`GET /api/v1/dashboard`, `/admin/dashboard`).

Everything comes from the stats projection's checkpoint (`projections.stats`), which
holds counters, not jobs: outcome counts per minute (per target) and per hour (per
target and code), the open counters per target, code and status, and queue depth
samples (`projections.depth`). One request catches the checkpoint up (shared with
concurrent requests), reads it, and makes one keyset read per target with PENDING rows
for the oldest PENDING age. Memory and work per request: O(buckets x targets x codes)
of the checkpoint, bounded by its windows (120 minutes, 35 days of hours, 7 days of
depth), never by the number of jobs or events. The pods: one read of the liveness rows and one
of the partition leases (`jobledger.http.queries.pods`).

Ranges: `1h` is 60 one-minute buckets (outcomes per target only: minutes are not kept
per code), `24h` and `7d` are hourly buckets (per target and code). A bucket's depth is
the queue at the end of it; the last bucket's is the queue now.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from jobledger.domain.timeutil import iso, parse_iso
from jobledger.http.queries.pods import pods
from jobledger.projections.depth import STATUSES
from jobledger.projections.stats import (
    OUTCOMES,
    hour_of,
    minute_of,
    oldest_pending_age,
    open_counts,
    stats_for_a_call,
)
from jobledger.storage.port import Store

OUTCOME_NAMES = list(OUTCOMES.values())
DEPTH_NAMES = [s.lower() for s in STATUSES]


@dataclass(frozen=True, slots=True)
class Range:
    name: str
    step: timedelta
    buckets: int
    per_code: bool  # outcome buckets kept per code at this grain

    def names(self, now: datetime) -> list[str]:
        """Bucket names, oldest first, the last one holding `now`."""
        bucket = minute_of if self.step == timedelta(minutes=1) else hour_of
        return [bucket(now - self.step * n) for n in range(self.buckets - 1, -1, -1)]


RANGES = {
    "1h": Range("1h", timedelta(minutes=1), 60, False),
    "24h": Range("24h", timedelta(hours=1), 24, True),
    "7d": Range("7d", timedelta(hours=1), 24 * 7, True),
}


def outcome_series(
    state: Mapping[str, Any], span: Range, names: list[str], target: str | None, code: str | None
) -> dict[str, list[int]]:
    """Per outcome, its count in each bucket of `names` (filtered by target / code)."""
    buckets = state["minutes"] if not span.per_code else state["hours"]
    series = {o: [0] * len(names) for o in OUTCOME_NAMES}
    for i, name in enumerate(names):
        for tgt, counts in buckets.get(name, {}).items():
            if target is not None and tgt != target:
                continue
            if not span.per_code:
                rows = [counts]  # minutes: {outcome: n} per target
            elif code is None:
                rows = list(counts.values())  # hours: {code: {outcome: n}} per target
            else:
                rows = [counts.get(code, {})]
            for row in rows:
                for outcome in OUTCOME_NAMES:
                    series[outcome][i] += row.get(outcome, 0)
    return series


def _depth_of(sample: Mapping[str, list[int]], target: str | None) -> list[int]:
    rows = [sample.get(target, [0, 0, 0])] if target is not None else list(sample.values())
    return [sum(row[k] for row in rows) for k in range(len(STATUSES))]


def depth_series(
    samples: Mapping[str, Mapping[str, list[int]]],
    names: list[str],
    target: str | None,
    now: list[int],
) -> dict[str, list[int | None]]:
    """Per status, the depth at the end of each bucket: the bucket's sample, else the
    one before it (no sample: nothing moved); None before the oldest kept sample.
    With no sample at or after the window, nothing moved in it: the depth is `now`."""
    before = [s for s in samples if s < names[0]]
    last: list[int] | None = _depth_of(samples[max(before)], target) if before else None
    if not any(s >= names[0] for s in samples):
        last = now
    values: list[list[int] | None] = []
    for name in names:
        if name in samples:
            last = _depth_of(samples[name], target)
        values.append(last)
    values[-1] = now
    return {
        status: [None if v is None else v[k] for v in values]
        for k, status in enumerate(DEPTH_NAMES)
    }


def target_rows(
    state: Mapping[str, Any], recent: list[str], paused: Mapping[str, datetime]
) -> list[dict[str, Any]]:
    """One row per target that has open jobs, recent outcomes or a pause: its open
    counts (and per code), outcomes per minute of `recent`, paused since."""
    queue = open_counts(state)
    targets = sorted(
        set(queue) | set(paused) | {t for name in recent for t in state["minutes"].get(name, {})}
    )
    rows = []
    for target in targets:
        entry = queue.get(target, {"pending": 0, "running": 0, "dead": 0, "codes": {}})
        per_minute = outcome_series(state, RANGES["1h"], recent, target, None)
        rows.append(
            {
                "target": target,
                "pending": entry["pending"],
                "running": entry["running"],
                "dead": entry["dead"],
                "codes": entry["codes"],
                "last_hour": {o: sum(v) for o, v in per_minute.items()},
                "succeeded_per_minute": per_minute["succeeded"],
                "paused_since": iso(paused[target]) if target in paused else None,
                "oldest_pending_age_s": None,
            }
        )
    return rows


async def dashboard(
    store: Store,
    now: datetime,
    span: Range,
    *,
    target: str | None = None,
    code: str | None = None,
    paused: Mapping[str, datetime] | None = None,
    live_s: float = 30.0,
) -> dict[str, Any]:
    """What the dashboard shows; `paused` is this process's worker's paused targets,
    None when it runs none (pause state lives in each worker's memory, and each live
    pod's heartbeat says it: `workers.pods[].paused`); a pod is live while its heartbeat
    is newer than `live_s`. A target paused on any live pod is paused since the earliest
    of their times."""
    position, state, caught_up = await stats_for_a_call(store)
    names = span.names(now)
    recent = RANGES["1h"].names(now)
    workers = await pods(store, now, live_s=live_s)
    said = [p["paused"] for p in workers["pods"] if p["live"] and p["paused"] is not None]
    if said:
        merged = dict(paused or {})
        for entry in (e for found in said for e in found):
            since = parse_iso(entry["since"])
            merged[entry["target"]] = min(since, merged.get(entry["target"], since))
        paused = merged
    rows = target_rows(state, recent, paused or {})
    for row in rows:
        if row["pending"] and (target is None or row["target"] == target):
            row["oldest_pending_age_s"] = await oldest_pending_age(store, row["target"], now)
    shown = [r for r in rows if target is None or r["target"] == target]
    depth_now = [sum(r[s] for r in shown) for s in DEPTH_NAMES]
    samples = state["depth"]["minutes" if not span.per_code else "hours"]
    outcomes = outcome_series(state, span, names, target, code)
    ages = [r["oldest_pending_age_s"] for r in shown if r["oldest_pending_age_s"] is not None]
    notes = []
    if code is not None and not span.per_code:
        notes.append(
            "per-minute outcomes are kept per target: the code filter applies to 24h and 7d"
        )
    if code is not None:
        notes.append("queue depth over time is kept per target: the depth chart ignores the code")
    if not caught_up:
        notes.append("the log grows faster than this call folds it: the numbers lag behind")
    if paused is None:
        notes.append(
            "no live worker pod says its paused targets (none runs, or they run an earlier"
            " release): see jobledger_target_paused on each worker's /metrics"
            " (jobledger worker --metrics-port)"
        )
    return {
        "as_of": iso(now),
        "position": position,
        "caught_up": caught_up,
        "range": span.name,
        "step_s": int(span.step.total_seconds()),
        "target": target,
        "code": code,
        "buckets": names,
        "outcomes": outcomes,
        "totals": {o: sum(v) for o, v in outcomes.items()},
        "depth": depth_series(samples, names, target, depth_now),
        "queue": {
            **dict(zip(DEPTH_NAMES, depth_now, strict=True)),
            "oldest_pending_age_s": max(ages, default=None),
        },
        "paused_known": paused is not None,
        "workers": workers,
        "targets": rows,
        "notes": notes,
    }
