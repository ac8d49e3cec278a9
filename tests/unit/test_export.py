"""`export`: JSON Lines of events in log order, filtered by time, resumable by position."""

from __future__ import annotations

import asyncio
import io
import json
from datetime import timedelta
from pathlib import Path

import pytest

from jobledger.cli import main
from jobledger.core.clock import FakeClock
from jobledger.domain.timeutil import iso
from jobledger.projections.audit import export_log
from jobledger.storage.memory import MemoryStore
from jobledger.storage.sqlite import SqliteStore
from tests.contract.projections.test_replay_workload import generate


@pytest.fixture
async def filled(clock: FakeClock) -> MemoryStore:
    store = MemoryStore()
    await store.open()
    await generate(store, clock, jobs_count=16)
    return store


def _lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines()]


async def test_everything_in_log_order_as_event_to_json(filled: MemoryStore) -> None:
    out = io.StringIO()
    report = await export_log(filled, out, page=5)
    rows = _lines(out.getvalue())
    assert rows == [e.to_json() for e in filled.tables.events]
    assert [r["position"] for r in rows] == list(range(1, len(filled.tables.events) + 1))
    assert report.events == len(filled.tables.events) and report.last_position == len(
        filled.tables.events
    )


async def test_since_is_inclusive_and_until_exclusive(filled: MemoryStore) -> None:
    times = sorted({e.at for e in filled.tables.events})
    since, until = times[2], times[5]
    out = io.StringIO()
    await export_log(filled, out, since=since, until=until)
    rows = _lines(out.getvalue())
    expected = [e.to_json() for e in filled.tables.events if since <= e.at < until]
    assert rows == expected and rows
    assert {r["at"] for r in rows} == {iso(t) for t in times[2:5]}


async def test_incremental_exports_add_up_to_one_export(
    filled: MemoryStore, clock: FakeClock
) -> None:
    first = io.StringIO()
    report = await export_log(filled, first)
    assert report.last_position is not None
    await generate(filled, clock, jobs_count=8, first=16)  # more work commits meanwhile
    second = io.StringIO()
    more = await export_log(filled, second, after_position=report.last_position)
    assert more.events == 8 * 4
    whole = io.StringIO()
    await export_log(filled, whole)
    assert first.getvalue() + second.getvalue() == whole.getvalue()
    nothing = io.StringIO()
    assert (await export_log(filled, nothing, after_position=len(filled.tables.events))).events == 0


async def test_the_export_command_writes_a_file(
    tmp_path: Path, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "x.db"
    store = SqliteStore(str(path))
    await store.open()
    try:
        start = clock.now()
        await generate(store, clock, jobs_count=16)
        events = await store.log.read_log(0, limit=10_000)
    finally:
        await store.close()
    since, until = start + timedelta(minutes=2), start + timedelta(minutes=4)
    out = tmp_path / "audit.jsonl"
    args = [
        "--store",
        f"sqlite:///{path}",
        "export",
        "--since",
        iso(since),
        "--until",
        iso(until),
        "--out",
        str(out),
    ]
    assert await asyncio.to_thread(main, args) == 0
    expected = [e.to_json() for e in events if since <= e.at < until]
    assert _lines(out.read_text()) == expected and expected
    assert f"exported {len(expected)} events; last_position={expected[-1]['position']}" in (
        capsys.readouterr().err
    )

    args = ["--store", f"sqlite:///{path}", "export", "--after-position", "10"]
    assert await asyncio.to_thread(main, args) == 0
    assert _lines(capsys.readouterr().out) == [e.to_json() for e in events[10:]]


async def test_bad_times_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--store", "memory://", "export", "--since", "yesterday"]
    assert await asyncio.to_thread(main, args) == 2
    assert "invalid_argument" in capsys.readouterr().err
    args = [
        "--store",
        "memory://",
        "export",
        "--since",
        "2026-03-02T10:00Z",
        "--until",
        "2026-03-02T09:00Z",
    ]
    assert await asyncio.to_thread(main, args) == 2
