"""The job: its row in the queue projection and how events change it.

The commands that make those events live in `job_commands` (enqueue, marks, claims,
admin) and `job_outcomes` (the one outcome path of both lanes): pure functions
`(job, command arguments) -> Change`, a state and a command in, events and the new row
out. `apply(job, event)` is the only way a row changes; `jobledger replay` folds the log
with its in-place twin `apply_state` (same helpers), so the live queue and a rebuilt one
cannot disagree. State machine::

    (new) --JobEnqueued--> PENDING
    PENDING --JobDispatched--> PENDING + in-flight mark        (fast lane, at-most-once)
    PENDING --JobClaimed--> RUNNING                            (long lane)
    RUNNING --JobClaimed--> RUNNING under a new token          (lease expired, at-least-once)
    PENDING|RUNNING --JobSucceeded--> (leaves the queue)
    PENDING|RUNNING --JobFailed--> PENDING, attempts+1, backoff
    PENDING|RUNNING --JobDeferred--> PENDING, no attempt spent (target unreachable,
                                     or a marked row that was not sent)
    PENDING --JobRequeued--> PENDING, mark dropped (takeover, at-least-once)
    RUNNING --JobRequeued--> PENDING, claim dropped (its pod died or stopped, at-least-once)
    (left) --JobRedelivered--> (left)           (a run whose outcome lost to another's)
    PENDING|RUNNING --JobDead--> DEAD
    DEAD --JobRetried--> PENDING, attempts 0                   (admin)
    DEAD --JobSkipped--> (leaves)                              (admin)
    PENDING|RUNNING --JobSkipped--> (leaves)                   (late schedule slot)
    PENDING --JobCancelled--> (leaves)                         (admin)
    DEAD --JobExpired--> (leaves)                              (retention)
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from jobledger.domain.events import Actor, Event, EventType, new_event
from jobledger.domain.records import compile_generated, fast_init
from jobledger.domain.timeutil import parse_iso

MAX_ERROR_CHARS = 2000


class JobStatus(enum.StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    DEAD = "DEAD"


class Lane(enum.StrEnum):
    FAST = "fast"
    LONG = "long"


class DeliveryMode(enum.StrEnum):
    AT_MOST_ONCE = "at_most_once"
    AT_LEAST_ONCE = "at_least_once"


_LANES = {lane.value: lane for lane in Lane}  # `Lane(value)` without the enum call


def job_stream(job_id: str) -> str:
    return f"job:{job_id}"


@fast_init
@dataclass(frozen=True, slots=True)
class Job:
    """One open job: a row of the queue projection (PENDING, RUNNING or DEAD)."""

    id: str
    code: str
    target: str
    lane: Lane
    key: str | None
    partition: int
    version: int
    payload: Any
    dedupe_key: str
    status: JobStatus
    attempts: int
    next_run_at: datetime
    created_at: datetime
    updated_at: datetime
    stream_version: int
    last_hash: str
    headers: Mapping[str, str] | None = None
    trace_id: str | None = None
    traceparent: str | None = None
    actor: Actor | None = None
    last_error: str | None = None
    dead_reason: str | None = None
    claimed_by: str | None = None
    claim_token: str | None = None
    lease_until: datetime | None = None
    inflight_token: str | None = None
    running_code: str | None = None
    closed_at: datetime | None = None

    @property
    def stream(self) -> str:
        return job_stream(self.id)

    @property
    def exclusive_code(self) -> str | None:
        """The code this row holds while it runs (at most one RUNNING row per exclusive
        code across pods; every store enforces it with a unique index or a check)."""
        return self.running_code if self.status == JobStatus.RUNNING else None

    @property
    def order_key(self) -> str:
        """The ordering key: `key`, or the row's own id when it has no key."""
        return self.key if self.key is not None else f"\x00{self.id}"


#: the job row's fields in their order: the one list every adapter's columns come from
#: (storage.rows, the SQL tables, the BSON documents)
JOB_FIELDS = tuple(f.name for f in fields(Job))

#: the fields a transition may change; the others are the job's identity, fixed by its
#: JobEnqueued (adapters rewrite only these on an update)
TRANSITION_FIELDS = (
    "status",
    "attempts",
    "next_run_at",
    "updated_at",
    "stream_version",
    "last_hash",
    "last_error",
    "dead_reason",
    "claimed_by",
    "claim_token",
    "lease_until",
    "inflight_token",
    "running_code",
    "closed_at",
)


@fast_init
@dataclass(frozen=True, slots=True)
class Change:
    """Events to append to one stream and the row they leave in its read model.

    The store applies a change only if the stream is still at `expected_version`
    (0: the stream must not exist yet), so a change computed from a stale row loses
    the race instead of overwriting it. `row` None removes the row from the read model.
    """

    stream: str
    expected_version: int
    events: tuple[Event, ...]
    row: Any  # Job | Schedule | None — typed per read model by the helpers below
    dedupe_key: str | None = None  # set on a new job: insert nothing if already seen
    partition: int | None = None  # a job change's partition (lease guards, wake-ups)
    #: events appended to a stream whose row already left the read model (a late run's
    #: JobRedelivered): the compare-and-set is on the log's (stream, version) alone
    closed_stream: bool = False

    @property
    def is_new(self) -> bool:
        return self.expected_version == 0


@fast_init
@dataclass(frozen=True, slots=True)
class NewJob:
    """What a business module asks `enqueue` for."""

    target: str
    payload: Any = None
    code: str | None = None
    key: str | None = None
    version: int = 0
    dedupe_key: str | None = None
    headers: Mapping[str, str] | None = None
    run_at: datetime | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class Stamp:
    """The envelope every command needs: when, who, and under which trace."""

    at: datetime
    actor: Actor | None = None
    trace_id: str | None = None


# --- folding events into the row ------------------------------------------------------


_CLEARED: dict[str, Any] = dict.fromkeys(
    ("claimed_by", "claim_token", "lease_until", "inflight_token", "running_code")
)
_LEAVES_QUEUE = frozenset(
    {EventType.JOB_SUCCEEDED, EventType.JOB_SKIPPED, EventType.JOB_CANCELLED, EventType.JOB_EXPIRED}
)


def evolve_source() -> str:
    """The source of `_evolve`: `dataclasses.replace` for `Job` without its per-call
    field introspection (every transition folds through it). One argument per field,
    in field order, positional as `Job(...)` takes them::

        def evolve(job, c):
            return Job(
                c["id"] if "id" in c else job.id,
                c["code"] if "code" in c else job.code,
                ...
                c["closed_at"] if "closed_at" in c else job.closed_at,
            )

    `evolve(job, {"status": JobStatus.DEAD})` equals
    `dataclasses.replace(job, status=JobStatus.DEAD)` (tests/unit/test_job_evolve.py
    compares the two for every field); tracebacks show this text (`<evolve Job>`)."""
    args = "".join(f"        c[{n!r}] if {n!r} in c else job.{n},\n" for n in JOB_FIELDS)
    return f"def evolve(job, c):\n    return Job(\n{args}    )\n"


_evolve: Callable[[Job, dict[str, Any]], Job] = compile_generated(
    evolve_source(), {"Job": Job}, "evolve", "evolve Job"
)


def _changes_for(current: Callable[[str], Any], event: Event) -> dict[str, Any]:
    """The fields `event` sets on a row (besides version, hash and updated_at);
    `current(name)` is a field's value before it (the few transitions that keep one)."""
    data = event.data
    kind = event.type
    if kind == EventType.JOB_DISPATCHED:
        return {"inflight_token": data["token"], "claimed_by": data.get("pod")}
    if kind == EventType.JOB_CLAIMED:
        return {
            "status": JobStatus.RUNNING,
            "claimed_by": data.get("pod"),
            "claim_token": data["token"],
            "lease_until": parse_iso(data["lease_until"]),
            "running_code": data.get("running_code"),
            "inflight_token": None,
        }
    if kind == EventType.JOB_LEASE_RENEWED:
        return {"lease_until": parse_iso(data["lease_until"])}
    if kind == EventType.JOB_FAILED:
        return {
            **_CLEARED,
            "status": JobStatus.PENDING,
            "attempts": data["attempts"],
            "next_run_at": parse_iso(data["next_run_at"]),
            "last_error": data.get("error"),
        }
    if kind in (EventType.JOB_DEFERRED, EventType.JOB_REQUEUED):
        next_run = data.get("next_run_at")
        return {
            **_CLEARED,
            "status": JobStatus.PENDING,
            "next_run_at": parse_iso(next_run) if next_run else current("next_run_at"),
            "last_error": data["error"] if "error" in data else current("last_error"),
        }
    if kind == EventType.JOB_DEAD:
        return {
            **_CLEARED,
            "status": JobStatus.DEAD,
            "attempts": data["attempts"] if "attempts" in data else current("attempts"),
            "last_error": data["error"] if "error" in data else current("last_error"),
            "dead_reason": data.get("reason"),
            "closed_at": event.at,
        }
    if kind == EventType.JOB_RETRIED:
        return {
            **_CLEARED,
            "status": JobStatus.PENDING,
            "attempts": 0,
            "next_run_at": event.at,
            "dead_reason": None,
            "closed_at": None,
        }
    raise ValueError(f"{event.stream}: unknown job event {kind}")


def _enqueued_fields(event: Event) -> dict[str, Any]:
    """Every field of the row a JobEnqueued starts, by name."""
    data = event.data
    return {
        "id": data["id"],
        "code": data["code"],
        "target": data["target"],
        "lane": _LANES.get(data["lane"]) or Lane(data["lane"]),
        "key": data.get("key"),
        "partition": data["partition"],
        "version": data.get("version", 0),
        "payload": data.get("payload"),
        "dedupe_key": data["dedupe_key"],
        "status": JobStatus.PENDING,
        "attempts": 0,
        "next_run_at": parse_iso(data["run_at"]) if data.get("run_at") else event.at,
        "created_at": event.at,
        "updated_at": event.at,
        "stream_version": event.version,
        "last_hash": event.hash,
        "headers": data.get("headers"),
        "trace_id": event.trace_id,
        "traceparent": data.get("traceparent"),
        "actor": event.actor,
    }  # the other fields: None, `Job`'s defaults (`apply_state` reads them with `get`)


def _opened(open_row: object, event: Event) -> bool:
    """Whether `event` starts a row (JobEnqueued); raises what `apply` refuses."""
    if event.type == EventType.JOB_ENQUEUED:
        if open_row is not None:
            raise ValueError(f"{event.stream}: enqueued twice")
        return True
    if open_row is None and event.type != EventType.JOB_REDELIVERED:
        raise ValueError(f"{event.stream} v{event.version}: {event.type} before JobEnqueued")
    return False


def apply(job: Job | None, event: Event) -> Job | None:
    """The row after `event`; None once the job has left the queue."""
    if _opened(job, event):
        return Job(**_enqueued_fields(event))
    if job is None or event.type in _LEAVES_QUEUE:
        return None  # left, or a late run's record after the job left the queue
    changes = _changes_for(job.__getattribute__, event)
    changes.update(stream_version=event.version, last_hash=event.hash, updated_at=event.at)
    return _evolve(job, changes)


#: a job row's fields by name, mutable: what a fold of a whole stream carries (`apply_state`)
JobState = dict[str, Any]


def apply_state(state: JobState | None, event: Event) -> JobState | None:
    """`apply` on a `JobState`, changed in place (same transitions, same helpers, no
    frozen `Job` per event): `Job(**state)` after any event is the row `apply` gives
    (tests/unit/test_job_state_fold.py). Replay folds a whole stream this way and builds
    its `Job` once. Raises what `apply` refuses, the state left as it was."""
    if _opened(state, event):
        return _enqueued_fields(event)
    if state is None or event.type in _LEAVES_QUEUE:
        return None
    changes = _changes_for(state.get, event)
    state.update(changes, stream_version=event.version, last_hash=event.hash, updated_at=event.at)
    return state


def runs_at_close(row: Job, closing: Event) -> Job:
    """`row`, the job as it was before `closing` (the event it left the queue with),
    with the runs that happened: a JobSucceeded's `attempts` counts the run that
    succeeded, which the row before it has not counted."""
    attempts = closing.data.get("attempts")
    if type(attempts) is not int or attempts == row.attempts:
        return row
    return _evolve(row, {"attempts": attempts})


def fold(events: list[Event]) -> Job | None:
    job: Job | None = None
    for event in events:
        job = apply(job, event)
    return job


# --- appending events ------------------------------------------------------------------


def append_events(job: Job, stamp: Stamp, *items: tuple[str, Mapping[str, Any]]) -> Change:
    """Append `items` as events after `job`'s last one and fold them into the row: the
    change every command of `job_commands` and `job_outcomes` returns."""
    events: list[Event] = []
    stream = job.stream
    version, prev = job.stream_version, job.last_hash
    row: Job | None = job
    for kind, data in items:
        version += 1
        event = new_event(
            stream,
            version,
            kind,
            data,
            at=stamp.at,
            actor=stamp.actor,
            trace_id=stamp.trace_id or job.trace_id,
            prev_hash=prev,
        )
        prev = event.hash
        events.append(event)
        row = apply(row, event)
    return Change(stream, job.stream_version, tuple(events), row, partition=job.partition)


#: what no store holds in a text: U+0000 (PostgreSQL) and lone surrogates (not UTF-8)
_UNSTORABLE_CHARS = re.compile("[\x00\ud800-\udfff]")


def error_text(error: str | None) -> str | None:
    """`error` cut to MAX_ERROR_CHARS (what every event keeps of a handler's error),
    U+0000 and lone surrogates replaced by U+FFFD. A handler's error is any text (a
    filename decoded with surrogateescape, a body with a NUL): an outcome carrying one
    could not be written (PostgreSQL refused the NUL, every driver the surrogate), so an
    at-least-once job ran again and again and nothing recorded why."""
    if error is None:
        return None
    return storable_text(error[:MAX_ERROR_CHARS])


def storable_text(text: str) -> str:
    """`text` with U+0000 and lone surrogates replaced by U+FFFD (what no store holds)."""
    return text if text.isascii() and "\x00" not in text else _UNSTORABLE_CHARS.sub("\ufffd", text)
