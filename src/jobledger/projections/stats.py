"""The stats projection: hourly outcome counts per target and code, and the queue's depth.

Closes reference gap G3's "no hourly counts". Counted from job events, by the hour of
each event's own time (UTC):

    succeeded  JobSucceeded              failed     JobFailed (answered, will retry)
    dead       JobDead                   skipped    JobSkipped
    cancelled  JobCancelled              expired    JobExpired (retention)

Only `JobEnqueued` carries a job's target and code, so the state keeps a compact map
`job id -> [target, code]` for open jobs and drops an entry when its job leaves the
queue (succeeded, skipped, cancelled, expired). A DEAD job stays open: it may be
retried. Hour buckets older than `keep_hours` before the newest bucket are dropped,
judged by event time, so the state stays small and a fresh replay gives the same one.

Queue depth and the oldest PENDING row's age per target are not history: `read_stats`
computes them from the jobs read model at call time.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from jobledger.domain.events import Event, EventType
from jobledger.domain.jobs import JobStatus
from jobledger.domain.timeutil import at_ms, iso
from jobledger.projections.runner import ProjectionRunner
from jobledger.storage.port import Store

if TYPE_CHECKING:
    from jobledger.engine import Engine

STATS = "stats"
OUTCOMES: dict[str, str] = {
    EventType.JOB_SUCCEEDED: "succeeded",
    EventType.JOB_FAILED: "failed",
    EventType.JOB_DEAD: "dead",
    EventType.JOB_SKIPPED: "skipped",
    EventType.JOB_CANCELLED: "cancelled",
    EventType.JOB_EXPIRED: "expired",
}
LEAVES = frozenset(
    {EventType.JOB_SUCCEEDED, EventType.JOB_SKIPPED, EventType.JOB_CANCELLED, EventType.JOB_EXPIRED}
)
UNKNOWN = "?"  # target or code of a job whose JobEnqueued was not seen (archived log)


def hour_of(value: datetime) -> str:
    """The hour bucket of a time: `2026-03-02T09:00Z`."""
    return at_ms(value).strftime("%Y-%m-%dT%H:00Z")


class StatsProjection:
    """Pure fold. State (plain JSON, updated in place and returned)::

    {"open": {job_id: [target, code]},
     "hours": {"2026-03-02T09:00Z": {target: {code: {"succeeded": 3, ...}}}}}
    """

    name = STATS

    def __init__(self, keep_hours: int = 24 * 35) -> None:
        self.keep_hours = keep_hours

    def initial(self) -> dict[str, Any]:
        return {"open": {}, "hours": {}}

    def apply(self, state: dict[str, Any], event: Event) -> dict[str, Any]:
        if not event.stream.startswith("job:"):
            return state
        job_id = event.stream[4:]
        open_jobs: dict[str, list[str]] = state["open"]
        if event.type == EventType.JOB_ENQUEUED:
            open_jobs[job_id] = [event.data["target"], event.data["code"]]
            return state
        outcome = OUTCOMES.get(event.type)
        if outcome is None:
            return state
        target, code = open_jobs.get(job_id, [UNKNOWN, UNKNOWN])
        if event.type in LEAVES:
            open_jobs.pop(job_id, None)
        hour = hour_of(event.at)
        hours: dict[str, Any] = state["hours"]
        if hour not in hours:
            hours[hour] = {}
            self._prune(hours)
            if hour not in hours:  # an event older than the kept window
                return state
        counts = hours[hour].setdefault(target, {}).setdefault(code, {})
        counts[outcome] = counts.get(outcome, 0) + 1
        return state

    def _prune(self, hours: dict[str, Any]) -> None:
        latest = max(hours)
        cutoff = hour_of(
            datetime.fromisoformat(latest.replace("Z", "+00:00")) - timedelta(hours=self.keep_hours)
        )
        for old in [h for h in hours if h < cutoff]:
            del hours[old]


def stats_reactor(engine: Engine, *, safety_poll_s: float | None = None) -> ProjectionRunner:
    """The stats projection kept up to date in the background, reporting its lag to
    the engine's observers; pass it to `Runtime(engine, reactors=[...])`."""
    return ProjectionRunner(
        engine.store,
        StatsProjection(),
        clock=engine.clock,
        observer=engine.observers,
        safety_poll_s=safety_poll_s
        if safety_poll_s is not None
        else 2 * engine.settings.safety_poll_s,
    )


async def catch_up_stats(
    store: Store, projection: StatsProjection | None = None
) -> tuple[int, Any]:
    """Bring the stats checkpoint up to the end of the log; (position, state)."""
    runner = ProjectionRunner(store, projection or StatsProjection())
    await runner.catch_up()
    return await runner.state()


async def read_stats(store: Store, now: datetime, *, hours: int = 24) -> dict[str, Any]:
    """What GET /stats serves: hourly counts of the last `hours` hours and the queue.

    Catches the stats checkpoint up first (saving it, which is safe from any pod), so
    the counts include everything committed before the call.
    """
    position, state = await catch_up_stats(store)
    since = hour_of(now - timedelta(hours=max(hours, 1) - 1))
    rows: list[dict[str, Any]] = []
    totals = dict.fromkeys(OUTCOMES.values(), 0)
    for hour in sorted(h for h in state["hours"] if h >= since):
        for target, codes in sorted(state["hours"][hour].items()):
            for code, counts in sorted(codes.items()):
                row = {"hour": hour, "target": target, "code": code}
                for outcome in OUTCOMES.values():
                    row[outcome] = counts.get(outcome, 0)
                    totals[outcome] += counts.get(outcome, 0)
                rows.append(row)
    return {
        "as_of": iso(now),
        "position": position,
        "since": since,
        "hours": rows,
        "totals": totals,
        "queue": await queue_stats(store, now),
    }


async def queue_stats(store: Store, now: datetime) -> dict[str, dict[str, Any]]:
    """Per target: PENDING, RUNNING and DEAD counts and the oldest PENDING row's age."""
    now = at_ms(now)
    queue: dict[str, dict[str, Any]] = {}
    for job in await store.all_jobs():
        entry = queue.setdefault(
            job.target, {"pending": 0, "running": 0, "dead": 0, "oldest_pending_age_s": None}
        )
        entry[job.status.value.lower()] += 1
        if job.status == JobStatus.PENDING:
            age = (now - job.created_at).total_seconds()
            if entry["oldest_pending_age_s"] is None or age > entry["oldest_pending_age_s"]:
                entry["oldest_pending_age_s"] = age
    return dict(sorted(queue.items()))
