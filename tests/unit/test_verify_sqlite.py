"""`jobledger verify` on a SQLite file whose `events` table was edited with sqlite3.

The command runs its own event loop (`asyncio.run`), so it runs in a thread here.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobledger.cli import main
from jobledger.core.clock import FakeClock
from jobledger.domain.timeutil import at_ms, iso
from jobledger.projections.audit import verify_log
from jobledger.storage.sqlite import SqliteStore
from jobledger.storage.sqlite.encode import iso_text
from tests.contract.projections.test_replay_workload import generate


async def _filled(path: Path, clock: FakeClock) -> int:
    store = SqliteStore(str(path))
    await store.open()
    try:
        workload = await generate(store, clock, jobs_count=40)
    finally:
        await store.close()
    return workload.events


async def test_an_update_of_an_event_row_is_detected(
    tmp_path: Path, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "audit.db"
    events = await _filled(path, clock)
    url = f"sqlite:///{path}"
    assert await asyncio.to_thread(main, ["--store", url, "verify"]) == 0
    assert "every hash chain holds" in capsys.readouterr().out

    with sqlite3.connect(path) as conn:
        position, stream, version, data = conn.execute(
            "SELECT position, stream, version, data FROM events"
            " WHERE type = 'JobEnqueued' ORDER BY position LIMIT 1 OFFSET 7"
        ).fetchone()
        edited = json.loads(data)
        edited["payload"] = {"n": 999_999}
        conn.execute(
            "UPDATE events SET data = ? WHERE position = ?", (json.dumps(edited), position)
        )

    assert await asyncio.to_thread(main, ["--store", url, "verify"]) == 1
    out = capsys.readouterr().out
    assert (
        f"problem: {stream} v{version} (position {position}): content does not match its hash"
        in out
    )
    assert f"verified {events} events" in out

    store = SqliteStore(str(path))
    await store.open()
    try:
        report = await verify_log(store, page=9)
    finally:
        await store.close()
    assert report.problems == [
        f"{stream} v{version} (position {position}): content does not match its hash"
    ]


async def test_a_deleted_first_event_fails_the_command(
    tmp_path: Path, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "audit.db"
    await _filled(path, clock)
    url = f"sqlite:///{path}"
    with sqlite3.connect(path) as conn:
        stream, position = conn.execute(
            "SELECT stream, position FROM events WHERE version = 1 ORDER BY position LIMIT 1"
        ).fetchone()
        conn.execute("DELETE FROM events WHERE position = ?", (position,))

    assert await asyncio.to_thread(main, ["--store", url, "verify"]) == 1
    out = capsys.readouterr().out
    assert f"problem: {stream} v2 " in out
    assert "the stream starts here; v1..v1 are missing" in out


@pytest.mark.parametrize(
    ("rewrite", "holds"),
    [
        (lambda at: at.replace("Z", "+00:00"), True),  # the same instant written another way
        (lambda at: at.replace(".000Z", "Z"), True),  # again (whole seconds in the fixture)
        (lambda at: at, True),  # the writers' form, hashed as it stands
        (lambda at: at.replace(".000Z", ".001Z"), False),  # another instant
        (lambda at: at[:5] + "13" + at[7:], False),  # not a time: reported, not a crash
    ],
)
async def test_an_event_time_is_hashed_as_the_writer_wrote_it(
    tmp_path: Path, clock: FakeClock, rewrite: Callable[[str], str], holds: bool
) -> None:
    path = tmp_path / "audit.db"
    await _filled(path, clock)
    with sqlite3.connect(path) as conn:
        at, position, stream = conn.execute(
            "SELECT at, position, stream FROM events ORDER BY position LIMIT 1"
        ).fetchone()
        assert at.endswith(":00.000Z")  # as `iso` writes it; FakeClock steps whole minutes
        conn.execute("UPDATE events SET at = ? WHERE position = ?", (rewrite(at), position))
    store = SqliteStore(str(path))
    await store.open()
    try:
        report = await verify_log(store)
    finally:
        await store.close()
    expected = [f"{stream} v1 (position {position}): content does not match its hash"]
    assert report.problems == ([] if holds else expected)


@given(st.datetimes(timezones=st.just(UTC)))
def test_iso_text_is_the_hashed_text_of_any_stored_time(value: datetime) -> None:
    for text in (iso(value), value.isoformat(), value.isoformat().replace("+00:00", "Z")):
        assert iso_text(text) == iso(at_ms(datetime.fromisoformat(text.replace("Z", "+00:00"))))
