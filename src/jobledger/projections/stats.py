"""The stats projection: open jobs per target, code and status, and outcome counts per
hour (per target and code) and per minute (per target).

Counted from job events, by the time of each event (UTC):

    succeeded  JobSucceeded              failed     JobFailed (answered, will retry)
    dead       JobDead                   skipped    JobSkipped
    cancelled  JobCancelled              expired    JobExpired (retention)

**Bounded state.** The checkpoint holds counters only: `open[target][code][status]`
(PENDING, RUNNING, DEAD), hour buckets of the last `keep_hours` and minute buckets of
the last `keep_minutes` (judged by event time against the newest bucket), and queue
depth samples per target (`projections.depth`). Its size grows with the number of
targets and codes, never with the number of jobs: no map per open job.

Only a job's `JobEnqueued` (version 1) carries its target and code, and a transition's
status *before* the event follows from the event just before it (each job event type
leaves one status: `STATUS_AFTER`). The fold therefore works a page at a time: for each
job stream whose first event in the page is not its `JobEnqueued`, it looks up version
1 and the previous version with one `LogReads.read_events_at` call (the stores' (stream,
version) unique index), and carries what it learns through the rest of the page. A fold
of the whole log in one page needs no look-ups; the checkpointed fold equals it.

The oldest PENDING row's age per target is not history: `read_stats` reads it at call
time with one keyset query per target that has PENDING rows (the oldest id, as ids are
time-ordered).
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from jobledger.core.clock import Clock
from jobledger.domain.events import Event, EventType
from jobledger.domain.jobs import JobStatus
from jobledger.domain.timeutil import at_ms, iso
from jobledger.projections import depth
from jobledger.projections.runner import ProjectionRunner
from jobledger.storage.port import JobFilter, Store

if TYPE_CHECKING:
    from jobledger.engine import Engine

STATS = "stats"
#: the checkpoint's layout; a checkpoint of another layout is folded again from the start
LAYOUT = 3
OUTCOMES: dict[str, str] = {
    EventType.JOB_SUCCEEDED: "succeeded",
    EventType.JOB_FAILED: "failed",
    EventType.JOB_DEAD: "dead",
    EventType.JOB_SKIPPED: "skipped",
    EventType.JOB_CANCELLED: "cancelled",
    EventType.JOB_EXPIRED: "expired",
}
PENDING, RUNNING, DEAD = JobStatus.PENDING.value, JobStatus.RUNNING.value, JobStatus.DEAD.value
OPEN_STATUSES = (PENDING, RUNNING, DEAD)
GONE = "GONE"  # left the queue
UNKNOWN = "?"  # target, code or status the log no longer shows (an archived stream)
#: the status a job is in right after an event of each type
STATUS_AFTER: dict[str, str] = {
    EventType.JOB_ENQUEUED: PENDING,
    EventType.JOB_DISPATCHED: PENDING,  # a fast-lane mark on a PENDING row
    EventType.JOB_CLAIMED: RUNNING,
    EventType.JOB_LEASE_RENEWED: RUNNING,
    EventType.JOB_FAILED: PENDING,
    EventType.JOB_DEFERRED: PENDING,
    EventType.JOB_REQUEUED: PENDING,
    EventType.JOB_DEAD: DEAD,
    EventType.JOB_RETRIED: PENDING,
    EventType.JOB_SUCCEEDED: GONE,
    EventType.JOB_SKIPPED: GONE,
    EventType.JOB_CANCELLED: GONE,
    EventType.JOB_EXPIRED: GONE,
    EventType.JOB_REDELIVERED: GONE,  # only ever appended to a closed stream
}

Place = tuple[str, int]


def hour_of(value: datetime) -> str:
    """The hour bucket of a time: `2026-03-02T09:00Z`."""
    return at_ms(value).strftime("%Y-%m-%dT%H:00Z")


def minute_of(value: datetime) -> str:
    """The minute bucket of a time: `2026-03-02T09:41Z`."""
    return at_ms(value).strftime("%Y-%m-%dT%H:%MZ")


def _bucket_time(bucket: str) -> datetime:
    return datetime.fromisoformat(bucket.replace("Z", "+00:00"))


class StatsProjection:
    """A paged fold (see `projections.runner.PagedProjection`). State, plain JSON::

    {"layout": 3,
     "open": {target: {code: {"PENDING": 3, "RUNNING": 1, "DEAD": 2}}},
     "hours": {"2026-03-02T09:00Z": {target: {code: {"succeeded": 3, ...}}}},
     "minutes": {"2026-03-02T09:41Z": {target: {"succeeded": 3, ...}}},
     "depth": {"minutes": {...}, "hours": {...}}}   (see projections.depth)
    """

    name = STATS

    def __init__(self, keep_hours: int = 24 * 35, keep_minutes: int = 120) -> None:
        self.keep_hours = keep_hours
        self.keep_minutes = keep_minutes

    def initial(self) -> dict[str, Any]:
        return {"layout": LAYOUT, "open": {}, "hours": {}, "minutes": {}, **depth.initial()}

    def accepts(self, state: Any) -> bool:
        return isinstance(state, dict) and state.get("layout") == LAYOUT

    def places(self, events: Sequence[Event]) -> list[Place]:
        """Where to look up what the page does not show: version 1 and the previous
        version of each job stream whose first event here is not its JobEnqueued."""
        seen: set[str] = set()
        wanted: list[Place] = []
        for event in events:
            if event.stream in seen or not event.stream.startswith("job:"):
                continue
            seen.add(event.stream)
            if event.type != EventType.JOB_ENQUEUED and event.version > 1:
                wanted.append((event.stream, 1))
                if event.version > 2:
                    wanted.append((event.stream, event.version - 1))
        return wanted

    def apply_page(
        self, state: dict[str, Any], events: Sequence[Event], found: Mapping[Place, Event]
    ) -> dict[str, Any]:
        """Fold `events` into `state` (updated in place and returned); `found` holds the
        events at `places(events)` that exist."""
        jobs: dict[str, list[str]] = {}  # stream -> [target, code, status], this page only
        for event in events:
            if not event.stream.startswith("job:"):
                continue
            job = jobs.get(event.stream)
            if job is None:
                job = jobs[event.stream] = self._before(event, found)
            self._count(state, event, job)
        return state

    @staticmethod
    def _before(event: Event, found: Mapping[Place, Event]) -> list[str]:
        if event.type == EventType.JOB_ENQUEUED:
            return [event.data["target"], event.data["code"], GONE]
        first = found.get((event.stream, 1)) if event.version > 1 else None
        previous = found.get((event.stream, event.version - 1))
        if first is None or first.type != EventType.JOB_ENQUEUED or previous is None:
            return [UNKNOWN, UNKNOWN, UNKNOWN]
        status = STATUS_AFTER.get(previous.type, UNKNOWN)
        return [first.data["target"], first.data["code"], status]

    def _count(self, state: dict[str, Any], event: Event, job: list[str]) -> None:
        target, code, before = job
        after = STATUS_AFTER.get(event.type, before)
        if after != before and event.type != EventType.JOB_REDELIVERED:
            self._move(state["open"], target, code, before, after)
            job[2] = after
            if target != UNKNOWN:
                depth.record_depth(state, target, before, after, minute_of(event.at))
        outcome = OUTCOMES.get(event.type)
        if outcome is None:
            return
        hour = self._bucket(state["hours"], hour_of(event.at), timedelta(hours=self.keep_hours))
        if hour is not None:
            counts = hour.setdefault(target, {}).setdefault(code, {})
            counts[outcome] = counts.get(outcome, 0) + 1
        minute = self._bucket(
            state["minutes"], minute_of(event.at), timedelta(minutes=self.keep_minutes)
        )
        if minute is not None:
            counts = minute.setdefault(target, {})
            counts[outcome] = counts.get(outcome, 0) + 1

    @staticmethod
    def _move(open_jobs: dict[str, Any], target: str, code: str, before: str, after: str) -> None:
        if UNKNOWN in (target, code):
            return
        codes = open_jobs.setdefault(target, {})
        counts: dict[str, int] = codes.setdefault(code, {})
        if before in OPEN_STATUSES:
            left = counts.get(before, 0) - 1
            if left:
                counts[before] = left
            else:
                counts.pop(before, None)
        if after in OPEN_STATUSES:
            counts[after] = counts.get(after, 0) + 1
        if not counts:
            del codes[code]
            if not codes:
                del open_jobs[target]

    @staticmethod
    def _bucket(buckets: dict[str, Any], name: str, keep: timedelta) -> dict[str, Any] | None:
        """The bucket `name`, made (and the window pruned) if new; None when it is older
        than the kept window."""
        if name in buckets:
            found: dict[str, Any] = buckets[name]
            return found
        buckets[name] = {}
        cutoff = _bucket_time(max(buckets)) - keep
        for old in [b for b in buckets if _bucket_time(b) < cutoff]:
            del buckets[old]
        return buckets.get(name)


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


#: one catch-up at a time per store in this process: concurrent readers wait for it
#: instead of folding the same events side by side
_CATCH_UP_LOCKS: weakref.WeakKeyDictionary[Store, asyncio.Lock] = weakref.WeakKeyDictionary()


#: log events one `read_stats` call folds at most before it answers (the stats reactor
#: folds the rest in the background): a drain that appends events faster than they
#: fold would otherwise keep a call catching up for as long as the drain lasts
CALL_BUDGET = 5_000


async def catch_up_stats(
    store: Store, projection: StatsProjection | None = None, *, max_events: int | None = None
) -> tuple[int, Any]:
    """Bring the stats checkpoint up to the end of the log (at most `max_events` of it);
    (position, state). A call that finds a catch-up under way waits for it and folds
    nothing more itself."""
    runner = ProjectionRunner(store, projection or StatsProjection())
    lock = _CATCH_UP_LOCKS.setdefault(store, asyncio.Lock())
    if lock.locked():
        async with lock:
            pass
    else:
        async with lock:
            await runner.catch_up(max_events=max_events)
    return await runner.state()


async def stats_for_a_call(store: Store) -> tuple[int, Any, bool]:
    """The checkpoint a request answers from: caught up by at most `CALL_BUDGET` events;
    (position, state, whether that reached the end of the log)."""
    position, state = await catch_up_stats(store, max_events=CALL_BUDGET)
    newest = await store.log.read_log_newest(None, limit=1)
    return position, state, not newest or (newest[0].position or 0) <= position


def open_counts(state: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per target: PENDING, RUNNING and DEAD counts and the same per code."""
    queue: dict[str, dict[str, Any]] = {}
    for target, codes in sorted(state["open"].items()):
        entry: dict[str, Any] = {"pending": 0, "running": 0, "dead": 0, "codes": {}}
        for code, counts in sorted(codes.items()):
            row = {s.lower(): counts.get(s, 0) for s in OPEN_STATUSES}
            entry["codes"][code] = row
            for status, count in row.items():
                entry[status] += count
        queue[target] = entry
    return queue


async def oldest_pending_age(store: Store, target: str, now: datetime) -> float | None:
    """Seconds since the oldest PENDING row of `target` was enqueued (one keyset read)."""
    rows, _ = await store.admin.list_jobs(
        JobFilter(status=JobStatus.PENDING, target=target),
        offset=0,
        limit=1,
        after="",
        count_limit=0,
    )
    return (at_ms(now) - rows[0].created_at).total_seconds() if rows else None


#: how long `shared_stats` answers from one computation: the calls of one process
#: within this many seconds of a computation's start share it
SHARED_MAX_AGE_S = 1.0
#: while the next computation runs, a call gets the last answer if it was computed
#: within this many seconds (else it waits for the one running)
SHARED_STALE_S = 5.0

#: per store and `hours`: (monotonic start, the computation) of `shared_stats`
_SHARED: weakref.WeakKeyDictionary[Store, dict[int, tuple[float, asyncio.Task[dict[str, Any]]]]]
_SHARED = weakref.WeakKeyDictionary()
#: per store and `hours`: (monotonic end, the answer) of the last computation that ended well
_ANSWERS: weakref.WeakKeyDictionary[Store, dict[int, tuple[float, dict[str, Any]]]]
_ANSWERS = weakref.WeakKeyDictionary()


async def shared_stats(
    store: Store, clock: Clock, *, hours: int = 24, max_age_s: float = SHARED_MAX_AGE_S
) -> dict[str, Any]:
    """`read_stats`, computed at most once per `max_age_s` per store and `hours` in this
    process; calls meanwhile get that computation's answer, and while the next one runs,
    the last answer if it is younger than `SHARED_STALE_S` (its `as_of` and `position`
    say how old it is). What `GET /stats` serves: each call of `read_stats` catches the
    checkpoint up (up to `CALL_BUDGET` events), saves it and reads every target's
    oldest row, so clients polling it while workers drain folded the log once per call
    and took the workers' CPU, and waited for each other. The ages are the process's
    monotonic time (how old a cached answer is, not a time of the domain); a computation
    that fails is not kept."""
    computations = _SHARED.setdefault(store, {})
    answers = _ANSWERS.setdefault(store, {})
    found = computations.get(hours)
    started = time.monotonic()
    if found is None or (found[1].done() and started - found[0] >= max_age_s):
        task = asyncio.create_task(read_stats(store, clock.now(), hours=hours))
        found = computations[hours] = (started, task)

        def settle(done: asyncio.Task[dict[str, Any]]) -> None:
            if not done.cancelled() and done.exception() is None:
                answers[hours] = (time.monotonic(), done.result())
            elif computations.get(hours, (0.0, None))[1] is done:
                del computations[hours]

        task.add_done_callback(settle)
    kept = answers.get(hours)
    if not found[1].done() and kept is not None and started - kept[0] < SHARED_STALE_S:
        return kept[1]
    # shielded: a caller that goes away does not cancel the others' answer
    return await asyncio.shield(found[1])


async def read_stats(store: Store, now: datetime, *, hours: int = 24) -> dict[str, Any]:
    """What GET /stats serves: hourly counts of the last `hours` hours, per-minute counts
    of the last hour, and the open queue per target.

    Catches the stats checkpoint up first (saving it, which is safe from any pod), so
    the counts include everything committed before the call — unless more than
    `CALL_BUDGET` events wait to be folded: then it answers with the checkpoint where the
    budget left it and `caught_up` false (the stats reactor folds on). Memory and reads
    per call grow with the number of targets and codes, not with the number of jobs.
    """
    position, state, caught_up = await stats_for_a_call(store)
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
    recent = minute_of(now - timedelta(minutes=59))
    minutes = [
        {"minute": minute, "target": target, **{o: counts.get(o, 0) for o in OUTCOMES.values()}}
        for minute in sorted(m for m in state["minutes"] if m >= recent)
        for target, counts in sorted(state["minutes"][minute].items())
    ]
    queue = open_counts(state)
    for target, entry in queue.items():
        entry["oldest_pending_age_s"] = (
            await oldest_pending_age(store, target, now) if entry["pending"] else None
        )
    by_status = {s: sum(e[s.lower()] for e in queue.values()) for s in OPEN_STATUSES}
    return {
        "as_of": iso(now),
        "position": position,
        "caught_up": caught_up,
        "since": since,
        "hours": rows,
        "minutes": minutes,
        "totals": totals,
        "queue": queue,
        "by_status": by_status,
    }
