"""Reference-engine rows → events, on sample documents shaped like reference §3."""

from __future__ import annotations

from datetime import UTC, datetime

from jobledger.domain import jobs
from jobledger.domain.events import Event, EventType, verify_chain
from jobledger.domain.jobs import Job, JobStatus, Lane
from jobledger.domain.policies import partition_of
from jobledger.storage.memory import MemoryStore
from jobledger.storage.mongodb.reference_import import (
    IMPORT_REASON,
    changes_from_reference_job,
    job_id_from_object_id,
)

CREATED = datetime(2026, 5, 1, 8, 0, tzinfo=UTC)
UPDATED = datetime(2026, 5, 1, 8, 31, tzinfo=UTC)


def _doc(**overrides: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "_id": "6632f1a0c2b5e4a1d3f09a77",
        "code": "do_update_oms",
        "target": "kafka:lastmiles.oms.do-update",
        "lane": "fast",
        "key": "DO-000123",
        "partition": partition_of("DO-000123", "do_update_oms:DO-000123:4"),
        "version": 4,
        "payload": {"event_id": "e-1", "status": "DELIVERED"},
        "dedupe_key": "do_update_oms:DO-000123:4",
        "status": "PENDING",
        "attempts": 0,
        "next_run_at": CREATED,
        "trace_id": "7f0c",
        "actor": {"id": "u-42", "via": "http", "role": "admin"},
        "headers": {"event_id": "e-1"},
        "created_at": CREATED,
        "updated_at": CREATED,
    }
    doc.update(overrides)
    return doc


def _events_and_row(doc: dict[str, object]) -> tuple[list[Event], Job | None]:
    imported = changes_from_reference_job(doc)
    (change,) = imported.changes
    return list(change.events), change.row


def test_pending_row_becomes_one_enqueued_event() -> None:
    events, row = _events_and_row(_doc())
    assert [e.type for e in events] == [EventType.JOB_ENQUEUED]
    assert events[0].data["reference_id"] == "6632f1a0c2b5e4a1d3f09a77"
    assert row is not None and row.status == JobStatus.PENDING and row.lane == Lane.FAST
    assert row.key == "DO-000123" and row.version == 4 and row.attempts == 0
    assert row.next_run_at == CREATED and row.trace_id == "7f0c"
    assert row.actor is not None and row.actor.id == "u-42"
    assert row.headers == {"event_id": "e-1"}
    assert jobs.fold(events) == row
    assert verify_chain(events) == []


def test_pending_row_with_spent_attempts_keeps_them() -> None:
    retry_at = datetime(2026, 5, 1, 8, 35, tzinfo=UTC)
    events, row = _events_and_row(
        _doc(attempts=2, last_error="broker said no", next_run_at=retry_at, updated_at=UPDATED)
    )
    assert [e.type for e in events] == [EventType.JOB_ENQUEUED, EventType.JOB_FAILED]
    assert row is not None and row.attempts == 2 and row.next_run_at == retry_at
    assert row.last_error == "broker said no"


def test_dead_row_stays_dead_with_reason_and_error() -> None:
    closed = datetime(2026, 5, 1, 9, 1, tzinfo=UTC)
    events, row = _events_and_row(
        _doc(status="DEAD", attempts=6, last_error="400", closed_at=closed)
    )
    assert [e.type for e in events] == [EventType.JOB_ENQUEUED, EventType.JOB_DEAD]
    assert row is not None and row.status == JobStatus.DEAD and row.attempts == 6
    assert row.dead_reason == IMPORT_REASON and row.closed_at == closed and row.last_error == "400"


def test_running_long_row_is_pending_again() -> None:
    _, row = _events_and_row(
        _doc(
            lane="long",
            target="schedule:nightly",
            code="nightly",
            key=None,
            status="RUNNING",
            claim_token="tok",
            lease_until=UPDATED,
            running_code="nightly",
            dedupe_key="nightly:2026-05-01T01:00:00.000Z",
            partition=partition_of(None, "nightly:2026-05-01T01:00:00.000Z"),
        )
    )
    assert row is not None and row.status == JobStatus.PENDING and row.claim_token is None


def test_partition_kept_as_stored_and_mismatch_reported() -> None:
    assert not changes_from_reference_job(_doc()).partition_mismatch
    odd = changes_from_reference_job(_doc(partition=63 if _doc()["partition"] != 63 else 62))
    assert odd.partition_mismatch
    assert odd.changes[0].row is not None and odd.changes[0].partition in (62, 63)


def test_ids_keep_creation_order() -> None:
    early = job_id_from_object_id("6632f1a0c2b5e4a1d3f09a77", CREATED)
    late = job_id_from_object_id("6632f1a0c2b5e4a1d3f09a70", UPDATED)
    assert len(early) == 32 and early < late


async def test_import_is_idempotent_on_a_store() -> None:
    store = MemoryStore()
    changes = list(changes_from_reference_job(_doc()).changes) + list(
        changes_from_reference_job(
            _doc(
                _id="6632f1a0c2b5e4a1d3f09a78",
                dedupe_key="other",
                key="DO-9",
                status="DEAD",
                attempts=6,
            )
        ).changes
    )
    assert await store.apply(changes) == [True, True]
    again = list(changes_from_reference_job(_doc()).changes)
    assert await store.apply(again) == [False]
    assert len(store.jobs) == 2 and len(store.log) == 3


def test_an_empty_key_is_imported_as_no_key() -> None:
    """Enqueue refuses key ""; a reference row that has one (the reference hashed it
    as no key: "" is falsy) comes in without a key, so it chains with no other row."""
    dedupe = "do_update_oms:x:1"
    _, row = _events_and_row(_doc(key="", partition=None, dedupe_key=dedupe))
    assert row is not None and row.key is None
    assert row.partition == partition_of(None, dedupe)
    assert row.order_key != ""
