"""Reference-engine rows → events, on sample documents shaped like the reference engine's `jobs` collection."""

from __future__ import annotations

import io
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import bson
import pytest
from bson import Binary, Code, DBRef, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.datetime_ms import DatetimeMS

from jobledger.cli import main
from jobledger.cli.import_reference import import_rows
from jobledger.cli.progress import CLEAR, Progress
from jobledger.domain import jobs
from jobledger.domain.chain import verify_chain
from jobledger.domain.events import Event, EventType
from jobledger.domain.jobs import Job, JobStatus, Lane
from jobledger.domain.policies import partition_of
from jobledger.storage.memory import MemoryStore
from jobledger.storage.mongodb.js_json import as_js_json
from jobledger.storage.mongodb.reference_import import (
    IMPORT_REASON,
    SOURCE_CODEC,
    RowError,
    changes_from_reference_job,
    convert_row,
    job_id_from_object_id,
)
from jobledger.storage.port import Store

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


def test_a_stored_partition_outside_the_stores_gets_the_hash() -> None:
    """A job in a partition no pod leases would never run (a reference run with more
    partitions than this store's)."""
    computed = _doc()["partition"]
    for stored in (64, 200, -1):
        imported = changes_from_reference_job(_doc(partition=stored))
        assert imported.changes[0].partition == computed
        assert imported.partition_mismatch
    narrow = changes_from_reference_job(_doc(partition=40), partitions=32)
    assert narrow.changes[0].partition == partition_of("DO-000123", "do_update_oms:DO-000123:4", 32)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("actor", {"id": "u\x00"}),
        ("actor", {"id": "u", "via": "h\x00"}),
        ("actor", {"id": "u", "role": "a\x00"}),
        ("trace_id", "t\x00"),
    ],
)
async def test_a_nul_in_the_actor_or_trace_is_one_row_refused_not_a_failed_import(
    store: Store, field: str, value: object
) -> None:
    """PostgreSQL refused the NUL when the batch was written: the import stopped there."""
    bad = _doc(_id="6632f1a0c2b5e4a1d3f09c02", dedupe_key="b-1", **{field: value})
    good = _doc(_id="6632f1a0c2b5e4a1d3f09c01", dedupe_key="g-1")
    counts = await import_rows(_rows(good, bad), store, Progress("x", stream=io.StringIO()))
    assert (counts.imported, counts.errors) == (1, 1)
    assert "U+0000" in counts.error_lines[0]


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
    assert await store.writes.apply(changes) == [True, True]
    again = list(changes_from_reference_job(_doc()).changes)
    assert await store.writes.apply(again) == [False]
    assert len(store.tables.jobs) == 2 and len(store.tables.events) == 3


def test_an_empty_key_is_imported_as_no_key() -> None:
    """Enqueue refuses key ""; a reference row that has one (the reference hashed it
    as no key: "" is falsy) comes in without a key, so it chains with no other row."""
    dedupe = "do_update_oms:x:1"
    _, row = _events_and_row(_doc(key="", partition=None, dedupe_key=dedupe))
    assert row is not None and row.key is None
    assert row.partition == partition_of(None, dedupe)
    assert row.order_key != ""


# --- Mongoose `Mixed` payloads: converted as the reference's JSON.stringify sent them ---


def _from_bson(doc: dict[str, object]) -> dict[str, Any]:
    """The row as `import-reference` reads it: BSON on the wire, decoded with its codec."""
    return bson.decode(bson.encode(doc), codec_options=SOURCE_CODEC)


MIXED = {
    "at": datetime(2026, 5, 1, 8, 0, 0, 123000, tzinfo=UTC),
    "order_id": ObjectId("6632f1a0c2b5e4a1d3f09a77"),
    "price": Decimal128("12.50"),
    "count": Int64(7),
    "big": Int64(2**60 + 5),
    "negative_big": Int64(-(2**60)),
    "ratio": 2.5,
    "whole": 5.0,
    # JavaScript prints an integral double's shortest digits padded with zeros
    # (node: JSON.stringify(2**60) === "1152921504606847000"), not its exact value
    "two_to_60": float(2**60),
    "past_int64": 1e20,  # kept a double: no store holds the integer 10^20
    "nan": float("nan"),
    "uuid": Binary(uuid.UUID("0f8fad5b-d9cb-469f-a165-70867728950e").bytes, 4),
    # subtype 4 but not 16 bytes: js-bson keeps it a Binary (`UUID.isValid` is false),
    # whose toJSON is base64
    "short_uuid": Binary(b"short", 4),
    "blob": b"\x00\x01hi",
    "md5": Binary(b"\xff" * 16, 5),
    "ts": Timestamp(1714550400, 3),
    "pattern": Regex("^DO-", "i"),
    "low": MinKey(),
    "high": MaxKey(),
    "fn": Code("return 1", {"x": ObjectId("6632f1a0c2b5e4a1d3f09a70")}),
    "ref": DBRef("orders", ObjectId("6632f1a0c2b5e4a1d3f09a71"), "tms", note="n"),
    "items": [
        {"sku": "A", "when": datetime(2026, 5, 2, tzinfo=UTC), "qty": Int64(2)},
        [ObjectId("6632f1a0c2b5e4a1d3f09a72"), None, True],
    ],
    "nested": {"b": 1, "10": "ten", "2": "two", "a": {"deeper": Decimal128("-0.001")}},
}
STRINGIFIED = {
    "at": "2026-05-01T08:00:00.123Z",
    "order_id": "6632f1a0c2b5e4a1d3f09a77",
    "price": {"$numberDecimal": "12.50"},
    "count": 7,
    "big": {"low": 5, "high": 2**28, "unsigned": False},
    "negative_big": {"low": 0, "high": -(2**28), "unsigned": False},
    "ratio": 2.5,
    "whole": 5,
    "two_to_60": 1152921504606847000,
    "past_int64": 1e20,
    "nan": None,
    "uuid": "0f8fad5b-d9cb-469f-a165-70867728950e",
    "short_uuid": "c2hvcnQ=",
    "blob": "AAFoaQ==",
    "md5": "/////////////////////w==",
    "ts": {"$timestamp": str((1714550400 << 32) | 3)},
    "pattern": {},
    "low": {},
    "high": {},
    "fn": {"code": "return 1", "scope": {"x": "6632f1a0c2b5e4a1d3f09a70"}},
    "ref": {"$ref": "orders", "$id": "6632f1a0c2b5e4a1d3f09a71", "note": "n", "$db": "tms"},
    "items": [
        {"sku": "A", "when": "2026-05-02T00:00:00.000Z", "qty": 2},
        ["6632f1a0c2b5e4a1d3f09a72", None, True],
    ],
    "nested": {"2": "two", "10": "ten", "b": 1, "a": {"deeper": {"$numberDecimal": "-0.001"}}},
}


def test_mixed_payload_is_converted_as_json_stringify_would() -> None:
    row = _from_bson(
        _doc(payload=MIXED, headers={"event_id": ObjectId("6632f1a0c2b5e4a1d3f09a77")})
    )
    assert isinstance(row["payload"]["order_id"], ObjectId)  # real BSON types went in
    imported = convert_row(row)
    assert not isinstance(imported, RowError), imported
    (change,) = imported.changes
    assert change.row is not None
    assert change.row.payload == STRINGIFIED
    # JavaScript's key order: array-index keys first, ascending, then the others
    assert list(change.row.payload["nested"]) == ["2", "10", "b", "a"]
    assert change.row.headers == {"event_id": "6632f1a0c2b5e4a1d3f09a77"}
    assert change.events[0].data["payload"] == STRINGIFIED
    assert verify_chain(list(change.events)) == []


def test_dates_javascript_can_hold_but_python_cannot() -> None:
    """Read with DATETIME_AUTO, a date past year 9999 arrives as DatetimeMS; it prints
    as JavaScript's toISOString does, and one beyond a JavaScript Date's range as null."""
    year_10000 = DatetimeMS(253402300800000)
    before_year_1 = DatetimeMS(-62135596800000 - 86_400_000)
    too_far = DatetimeMS(8_640_000_000_000_001)
    row = _from_bson(_doc(payload={"a": year_10000, "b": before_year_1, "c": too_far}))
    assert isinstance(row["payload"]["a"], DatetimeMS)
    assert as_js_json(row["payload"]) == {
        "a": "+010000-01-01T00:00:00.000Z",
        "b": "0000-12-31T00:00:00.000Z",
        "c": None,
    }
    assert as_js_json(datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)) == (
        "1969-12-31T23:59:59.999Z"
    )
    assert as_js_json(-0.0) == 0 and as_js_json(1e21) == 1e21 and as_js_json(Int64(2**53)) == 2**53


async def _rows(*docs: dict[str, object]) -> AsyncIterator[dict[str, Any]]:
    for doc in docs:
        yield _from_bson(doc)


def _bad_rows() -> list[dict[str, object]]:
    def other(n: int, **overrides: object) -> dict[str, object]:
        return _doc(
            _id=f"6632f1a0c2b5e4a1d3f09b{n:02d}",
            dedupe_key=f"d-{n}",
            key=f"K-{n}",
            partition=None,
            **overrides,
        )

    missing = other(1)
    del missing["dedupe_key"]
    return [
        other(0),
        missing,
        other(2, status="DONE"),
        other(3, payload={"note": "nul \x00 inside"}),
        other(4, code="c" * 600),
        other(5, payload={"at": ObjectId("6632f1a0c2b5e4a1d3f09a77")}),
    ]


async def test_rows_that_cannot_be_imported_are_reported_and_the_rest_imported() -> None:
    store = MemoryStore()
    piped = io.StringIO()
    with Progress("import-reference", unit="rows", stream=piped) as progress:
        counts = await import_rows(_rows(*_bad_rows()), store, progress)
    assert (counts.read, counts.imported, counts.errors) == (6, 2, 3 + 1)
    lines = piped.getvalue().splitlines()
    assert lines == counts.error_lines
    assert lines[0] == "row 6632f1a0c2b5e4a1d3f09b01: missing field 'dedupe_key'"
    assert lines[1].startswith("row 6632f1a0c2b5e4a1d3f09b02: ") and "'DONE'" in lines[1]
    assert lines[2].startswith("row 6632f1a0c2b5e4a1d3f09b03: ") and "U+0000" in lines[2]
    assert lines[3].startswith("row 6632f1a0c2b5e4a1d3f09b04: ") and "600 bytes" in lines[3]
    assert CLEAR not in piped.getvalue()  # no bar when piped
    payloads = sorted(str(job.payload) for job in store.tables.jobs.values())
    assert payloads == sorted(
        [str({"event_id": "e-1", "status": "DELIVERED"}), str({"at": "6632f1a0c2b5e4a1d3f09a77"})]
    )
    assert counts.summary().endswith("errors=4")
    again = await import_rows(_rows(*_bad_rows()), store, Progress("x", stream=io.StringIO()))
    assert (again.imported, again.already_there, again.errors) == (0, 2, 4)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


async def test_progress_on_a_terminal_counts_rows_and_prints_errors_above_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TERM", "xterm")
    term = Terminal()
    with Progress("import-reference", total=6, unit="rows", stream=term, interval=0) as progress:
        counts = await import_rows(_rows(*_bad_rows()), MemoryStore(), progress, dry_run=True)
        assert progress.done == 6
    text = term.getvalue()
    assert "import-reference [" in text and "6/6 rows" in text
    assert CLEAR + "row 6632f1a0c2b5e4a1d3f09b01: missing field 'dedupe_key'\n" in text
    assert (counts.imported, counts.errors) == (0, 4)  # a dry run writes nothing


def test_a_source_url_without_a_database_is_one_line_before_any_connection(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = f"sqlite:///{tmp_path / 'target.db'}"
    code = main(["--store", store, "import-reference", "--from", "mongodb://127.0.0.1:9/"])
    assert code == 2
    err = capsys.readouterr().err
    assert "the --from URL names no database" in err and "--db" in err


def test_a_row_with_bytes_that_are_not_utf8_is_reported_and_the_read_goes_on() -> None:
    raw = bytearray(bson.encode(_doc(payload={"note": "caf\u00e9"})))
    at = raw.index("\u00e9".encode())
    raw[at : at + 2] = b"\xff\xfe"  # two bytes that are not UTF-8
    row = bson.decode(bytes(raw), codec_options=SOURCE_CODEC)  # no exception: read on
    result = convert_row(row)
    assert result == RowError("6632f1a0c2b5e4a1d3f09a77", "a string holds bytes that are not UTF-8")
    assert not isinstance(convert_row(_from_bson(_doc(payload={"note": "caf\u00e9"}))), RowError)
