"""Finished jobs: jobs that left the queue — SUCCEEDED, SKIPPED,
CANCELLED, EXPIRED — browsed from the log, where they stay until the archive's
retention (`log_retention_days`) removes their streams.

No read model holds them: a page reads the log backwards (`LogReads.read_log_newest`, the
position index) for closing events, looks up each one's JobEnqueued (target, code, key,
dedupe key: one `read_events_at` per chunk) to apply the filters, then reads the events
before each match's closing event to fold the row as it was when it ended. A call
reads at most `SCAN_LIMIT` events, so its cost does not grow with the log: when a
rare filter finds fewer rows than asked, the answer says how far it read (`next`, a log
position) and the caller goes on from there.

A job id or a dedupe key is not a scan: the job's stream is read directly (the dedupe
key through the log's unique dedupe index, `Writes.dedupe_holders`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from jobledger.admin.jobs import CLOSED_STATUS
from jobledger.core.ids import is_job_id
from jobledger.domain import jobs
from jobledger.domain.events import Event
from jobledger.domain.jobs import Job
from jobledger.storage.port import Store

#: log events read at most by one call
SCAN_LIMIT = 5000
#: events read per round trip
CHUNK = 500
FINISHED_STATUSES = list(CLOSED_STATUS.values())
_BY_STATUS = {status: event_type for event_type, status in CLOSED_STATUS.items()}


@dataclass(frozen=True, slots=True)
class FinishedFilter:
    status: str | None = None  # one of FINISHED_STATUSES, None: any of them
    target: str | None = None
    code: str | None = None
    key: str | None = None


@dataclass(frozen=True, slots=True)
class Finished:
    """A job that left the queue: the row as it was before `closing` (with `closed_at`
    set to when it ended), how it ended, and the closing event itself."""

    job: Job
    status: str
    closing: Event


@dataclass(frozen=True, slots=True)
class FinishedPage:
    """Newest first; `next`: pass it as `before` to read on (None: the log's start was
    reached); `scanned`: how many log events this call read."""

    rows: list[Finished]
    next: int | None
    scanned: int


def _wanted(flt: FinishedFilter) -> set[str]:
    return {_BY_STATUS[flt.status]} if flt.status else set(CLOSED_STATUS)


def _matches(enqueued: Event, flt: FinishedFilter) -> bool:
    data = enqueued.data
    return all(
        want is None or data.get(name) == want
        for name, want in (("target", flt.target), ("code", flt.code), ("key", flt.key))
    )


async def _rows(store: Store, closings: list[Event]) -> list[Finished]:
    """Fold each closed job's events before its closing one (one round trip)."""
    places = [(e.stream, v) for e in closings for v in range(1, e.version)]
    by_stream: dict[str, list[Event]] = {}
    for event in sorted(await store.log.read_events_at(places), key=lambda e: e.version):
        by_stream.setdefault(event.stream, []).append(event)
    found = []
    for closing in closings:
        row = jobs.fold(by_stream.get(closing.stream, []))
        if row is not None:
            ended = replace(jobs.runs_at_close(row, closing), closed_at=closing.at)
            found.append(Finished(ended, CLOSED_STATUS[closing.type], closing))
    return found


async def browse(
    store: Store,
    flt: FinishedFilter,
    *,
    before: int | None = None,
    limit: int = 50,
    scan: int | None = None,
) -> FinishedPage:
    """Finished jobs matching `flt`, newest first, ending before log position `before`,
    reading at most `scan` (default `SCAN_LIMIT`) log events."""
    scan = SCAN_LIMIT if scan is None else scan
    wanted = _wanted(flt)
    filtered = any(v is not None for v in (flt.target, flt.code, flt.key))
    matched: list[Event] = []
    cursor, scanned = before, 0
    while len(matched) < limit and scanned < scan:
        events = await store.log.read_log_newest(cursor, limit=min(CHUNK, scan - scanned))
        if not events:
            cursor = None
            break
        scanned += len(events)
        cursor = events[-1].position
        closings = [e for e in events if e.type in wanted and e.stream.startswith("job:")]
        if filtered and closings:
            firsts = await store.log.read_events_at([(e.stream, 1) for e in closings])
            enqueued = {e.stream: e for e in firsts}
            closings = [
                e for e in closings if e.stream in enqueued and _matches(enqueued[e.stream], flt)
            ]
        if len(matched) + len(closings) >= limit:
            closings = closings[: limit - len(matched)]
            cursor = closings[-1].position
        matched += closings
    return FinishedPage(await _rows(store, matched), cursor, scanned)


async def find(
    store: Store, *, job_id: str | None = None, dedupe_key: str | None = None
) -> list[Finished]:
    """The finished job with this id or dedupe key ([] when none, or when it is open)."""
    if dedupe_key is not None:
        job_id = await store.admin.dedupe_holder(dedupe_key)
    if job_id is None or not is_job_id(job_id):
        return []
    history = await store.log.read_stream(jobs.job_stream(job_id))
    closing = [e for e in history if e.type in _BY_STATUS.values()]
    return await _rows(store, closing[-1:])
