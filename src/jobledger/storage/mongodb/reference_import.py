"""Turn rows of the reference engine's `jobs` collection into jobledger events.

Pure: a reference document goes in, the `Change`s that recreate it as a stream come out
(JobEnqueued with the reference's own partition, then JobFailed or JobDead for the state
it had). `jobledger import-reference` feeds them to any store.

Mapping (docs/mongodb.md, "Migrating from the reference engine"):

* `_id` (ObjectId) → a jobledger id with the same creation millisecond, so newest-first
  order is kept; the ObjectId is kept in the event as `reference_id`.
* `partition` is taken as stored (jobledger's hash gives the same value; a mismatch is
  reported, never silently changed, so per-key order survives the move).
* PENDING → PENDING with its attempts and next_run_at; RUNNING → PENDING due at once
  (its claiming pod is gone after the move; the reference's long lane reran such rows
  too); DEAD → DEAD with its last error and "imported from the reference engine".
* `payload` and `headers` (Mongoose `Mixed`) are converted as the reference's
  `JSON.stringify` sent them (`js_json.as_js_json`: dates → ISO strings, ObjectIds →
  hex, ...), then checked by the same rules as `enqueue` (`check_new_job`).

`convert_row` never raises: a row that cannot be imported becomes a `RowError` naming
the row and the reason, so the rest of the collection is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bson.codec_options import CodecOptions, DatetimeConversion

from jobledger.domain import job_commands, jobs
from jobledger.domain.enqueue_rules import check_new_job
from jobledger.domain.errors import JobledgerError
from jobledger.domain.events import Actor
from jobledger.domain.jobs import Change, JobStatus, Lane, NewJob, Stamp
from jobledger.domain.policies import partition_of
from jobledger.domain.timeutil import at_ms
from jobledger.storage.mongodb.js_json import as_js_json

IMPORT_REASON = "imported from the reference engine"
#: how the import reads the reference's rows: aware UTC dates, dates beyond
#: `datetime`'s years as DatetimeMS (converted as JavaScript would), invalid UTF-8 as
#: lone surrogates (`surrogateescape`), so that no row's content stops the read of a
#: whole batch: `convert_row` reports such a row (the reference's Node driver, which
#: validates UTF-8 by default, could not read it either)
SOURCE_CODEC: CodecOptions[dict[str, Any]] = CodecOptions(
    tz_aware=True,
    tzinfo=UTC,
    datetime_conversion=DatetimeConversion.DATETIME_AUTO,
    unicode_decode_error_handler="surrogateescape",
)
IMPORTED_STATUSES = (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.DEAD)
#: the reference had no payload limit; the import takes what enqueue takes by default
DEFAULT_MAX_PAYLOAD_BYTES = 1_048_576


@dataclass(frozen=True, slots=True)
class Imported:
    changes: tuple[Change, ...]
    partition_mismatch: bool


@dataclass(frozen=True, slots=True)
class RowError:
    """A reference row that was not imported: its `_id` and why."""

    row_id: str
    reason: str

    def line(self) -> str:
        return f"row {self.row_id}: {self.reason}"


def convert_row(
    doc: Mapping[str, Any],
    *,
    partitions: int = 64,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> Imported | RowError:
    """`changes_from_reference_job`, or the row's error instead of an exception."""
    if _invalid_utf8(doc):
        return RowError(_row_id(doc), "a string holds bytes that are not UTF-8")
    try:
        return changes_from_reference_job(
            doc, partitions=partitions, max_payload_bytes=max_payload_bytes
        )
    except KeyError as exc:
        return RowError(_row_id(doc), f"missing field {exc.args[0]!r}")
    except JobledgerError as exc:
        return RowError(_row_id(doc), exc.message)
    except Exception as exc:  # pure conversion: whatever a malformed row raises
        return RowError(_row_id(doc), f"{type(exc).__name__}: {exc}")


def _row_id(doc: Mapping[str, Any]) -> str:
    return str(doc.get("_id", "(no _id)")).encode("utf-8", "replace").decode()


def _invalid_utf8(value: Any) -> bool:
    """Whether a string in `value` (keys included) came from bytes that are not UTF-8:
    decoded with `surrogateescape`, they are lone surrogates, which valid UTF-8 never
    decodes to."""
    if isinstance(value, str):
        return any("\ud800" <= ch <= "\udfff" for ch in value)
    if isinstance(value, Mapping):
        return any(_invalid_utf8(k) or _invalid_utf8(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_invalid_utf8(item) for item in value)
    return False


def job_id_from_object_id(object_id: str, created_at: datetime) -> str:
    """48 bits of the creation millisecond + the ObjectId's last 10 bytes."""
    ms = int(at_ms(created_at).timestamp() * 1000)
    return f"{ms & 0xFFFFFFFFFFFF:012x}{object_id[-20:].lower()}"


def _actor(raw: Any) -> Actor | None:
    if not isinstance(raw, Mapping):
        return None
    ident = raw.get("id") or raw.get("_id") or raw.get("user_id") or raw.get("username")
    return Actor(
        id=_text(ident, "actor id"),
        via=_text(raw.get("via", "api"), "actor via") or "api",
        role=_text(raw.get("role"), "actor role"),
    )


def _text(value: Any, name: str) -> str | None:
    """`value` as stored text (None stays None); U+0000 is refused as `enqueue` refuses
    it (PostgreSQL cannot store it: the whole batch's write failed)."""
    if value is None:
        return None
    text = str(value)
    if "\x00" in text:
        raise ValueError(f"{name} contains U+0000 (NUL), which PostgreSQL cannot store")
    return text


def _partition(doc: Mapping[str, Any], computed: int, partitions: int) -> tuple[int, bool]:
    """(the partition, whether the stored one differs from jobledger's hash): the stored
    one when it is one of the store's, else the hash (a reference run with more
    partitions stored some no pod here would ever take)."""
    stored = doc.get("partition")
    if stored is None:
        return computed, False
    number = int(stored)
    return (number if 0 <= number < partitions else computed), number != computed


def changes_from_reference_job(
    doc: Mapping[str, Any],
    *,
    partitions: int = 64,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> Imported:
    """The changes that recreate one reference row; raises on a row that cannot be
    imported (`convert_row` turns that into a `RowError`)."""
    object_id = str(doc["_id"])
    created = at_ms(doc.get("created_at") or doc["next_run_at"])
    status = JobStatus(doc.get("status") or "PENDING")
    if status not in IMPORTED_STATUSES:
        raise ValueError(f"status {status.value!r} is not one the reference engine wrote")
    key = doc.get("key") or None  # "" is no key, as at enqueue (the reference hashed it so)
    dedupe_key = str(doc["dedupe_key"])
    computed = partition_of(key, dedupe_key, partitions)
    partition, mismatch = _partition(doc, computed, partitions)
    next_run_at = at_ms(doc.get("next_run_at") or created)
    spec = NewJob(
        target=str(doc["target"]),
        payload=as_js_json(doc.get("payload")),
        code=doc.get("code"),
        key=key,
        version=int(doc.get("version") or 0),
        dedupe_key=dedupe_key,
        headers=as_js_json(doc.get("headers")),
        run_at=next_run_at if status == JobStatus.PENDING else None,
    )
    check_new_job(spec, max_payload_bytes)
    stamp = Stamp(created, _actor(doc.get("actor")), _text(doc.get("trace_id"), "trace_id"))
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
    return Imported((merged,), mismatch)


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
