"""Turn rows of the reference engine's `jobs` collection into jobledger events.

Pure: a reference document goes in, the `Change`s that recreate it as a stream come out
(JobEnqueued with the reference's own partition, then JobFailed or JobDead for the state
it had). `jobledger import-reference` feeds them to any store.

Mapping (reference §3 → docs/mongodb.md "Migrating from the reference engine"):

* `_id` (ObjectId) → a jobledger id with the same creation millisecond, so newest-first
  order is kept; the ObjectId is kept in the event as `reference_id`.
* `partition` is taken as stored (jobledger's hash gives the same value; a mismatch is
  reported, never silently changed, so per-key order survives the move).
* PENDING → PENDING with its attempts and next_run_at; RUNNING → PENDING due at once
  (its claiming pod is gone after the move; the reference's long lane reran such rows
  too); DEAD → DEAD with its last error and "imported from the reference engine".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobledger.domain import job_commands, jobs
from jobledger.domain.events import Actor
from jobledger.domain.jobs import Change, JobStatus, Lane, NewJob, Stamp
from jobledger.domain.policies import partition_of
from jobledger.domain.timeutil import at_ms

IMPORT_REASON = "imported from the reference engine"


@dataclass(frozen=True, slots=True)
class Imported:
    changes: tuple[Change, ...]
    partition_mismatch: bool


def job_id_from_object_id(object_id: str, created_at: datetime) -> str:
    """48 bits of the creation millisecond + the ObjectId's last 10 bytes."""
    ms = int(at_ms(created_at).timestamp() * 1000)
    return f"{ms & 0xFFFFFFFFFFFF:012x}{object_id[-20:].lower()}"


def _actor(raw: Any) -> Actor | None:
    if not isinstance(raw, Mapping):
        return None
    ident = raw.get("id") or raw.get("_id") or raw.get("user_id") or raw.get("username")
    return Actor(
        id=str(ident) if ident is not None else None,
        via=str(raw.get("via", "api")),
        role=raw.get("role"),
    )


def changes_from_reference_job(doc: Mapping[str, Any], *, partitions: int = 64) -> Imported:
    object_id = str(doc["_id"])
    created = at_ms(doc.get("created_at") or doc["next_run_at"])
    status = JobStatus(doc.get("status") or "PENDING")
    key = doc.get("key") or None  # "" is no key, as at enqueue (the reference hashed it so)
    dedupe_key = str(doc["dedupe_key"])
    computed = partition_of(key, dedupe_key, partitions)
    partition = int(doc["partition"]) if doc.get("partition") is not None else computed
    next_run_at = at_ms(doc.get("next_run_at") or created)
    spec = NewJob(
        target=str(doc["target"]),
        payload=doc.get("payload"),
        code=doc.get("code"),
        key=key,
        version=int(doc.get("version") or 0),
        dedupe_key=dedupe_key,
        headers=doc.get("headers"),
        run_at=next_run_at if status == JobStatus.PENDING else None,
    )
    stamp = Stamp(created, _actor(doc.get("actor")), doc.get("trace_id"))
    first = job_commands.enqueued(
        job_id=job_id_from_object_id(object_id, created),
        spec=spec,
        code=str(doc.get("code") or doc["target"]),
        lane=Lane(doc["lane"]),
        partition=partition,
        dedupe_key=dedupe_key,
        stamp=stamp,
    )
    first = _with_reference_id(first, object_id)
    row = first.row
    assert row is not None
    closed = at_ms(doc.get("closed_at") or doc.get("updated_at") or created)
    later = job_commands.carried_over(
        row,
        Stamp(
            closed if status == JobStatus.DEAD else at_ms(doc.get("updated_at") or created),
            stamp.actor,
            stamp.trace_id,
        ),
        status=JobStatus.DEAD if status == JobStatus.DEAD else JobStatus.PENDING,
        attempts=int(doc.get("attempts") or 0),
        error=doc.get("last_error"),
        next_run_at=next_run_at
        if status == JobStatus.PENDING
        else at_ms(doc.get("updated_at") or created),
        reason=IMPORT_REASON,
    )
    merged = Change(
        first.stream,
        0,
        first.events + later.events,
        later.row,
        dedupe_key=first.dedupe_key,
        partition=first.partition,
    )
    return Imported((merged,), partition != computed)


def _with_reference_id(change: Change, object_id: str) -> Change:
    """Record the ObjectId in the JobEnqueued data (re-hashed through the domain)."""
    from jobledger.domain.events import new_event

    event = change.events[0]
    data = {**event.data, "reference_id": object_id}
    rebuilt = new_event(
        event.stream,
        1,
        event.type,
        data,
        at=event.at,
        actor=event.actor,
        trace_id=event.trace_id,
        prev_hash=event.prev_hash,
    )
    row = jobs.apply(None, rebuilt)
    return Change(
        change.stream, 0, (rebuilt,), row, dedupe_key=change.dedupe_key, partition=change.partition
    )
