"""A schedule's run history from the log: slots that ran, were
skipped or missed (with reasons), slots whose job failed, admin changes, bounded pages
of the stream; the API route and the page."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import pytest

from jobledger.core.clock import FakeClock
from jobledger.domain import job_outcomes, jobs
from jobledger.domain.job_outcomes import Result, RunResult
from jobledger.domain.schedules.row import schedule_target
from jobledger.storage.port import JobFilter, Store
from tests.unit.http_helpers import ADMIN, ADMIN_KEY, VIEWER, World, client, world
from tests.unit.test_http_page import login


@pytest.fixture
async def w(store: Store, clock: FakeClock) -> AsyncIterator[World]:
    """On every store: pages are read by (stream, version) with each one's index."""
    async with world(store, clock) as built:
        yield built


async def _slot_jobs(w: World) -> list[Any]:
    rows, _ = await w.store.admin.list_jobs(
        JobFilter(target=schedule_target("cleanup")), offset=0, limit=100
    )
    return sorted(rows, key=lambda j: j.payload["slot"])


async def _story(w: World) -> None:
    """09:10 runs; 09:20-09:50 found due at once (three dropped, 09:50 enqueued, its job
    goes DEAD); disabled by alice."""
    w.clock.advance(minutes=10, seconds=5)
    await w.scheduler.tick()
    (first,) = await _slot_jobs(w)
    await w.scheduler.run_slot("cleanup", first)
    w.clock.advance(minutes=40)
    await w.scheduler.tick()
    newest = next(j for j in await _slot_jobs(w) if j.id != first.id)
    policy = job_outcomes.OutcomePolicy(jobs.DeliveryMode.AT_MOST_ONCE, 3, (1, 2))
    outcome = job_outcomes.decide_outcome(
        newest, RunResult(Result.DEAD_NOW, "disk full"), policy, w.stamp()
    )
    assert await w.store.writes.apply([outcome.change]) == [True]
    async with client(w.app) as http:
        assert (
            await http.post("/api/v1/schedules/cleanup/disable", headers=ADMIN)
        ).status_code == 200


async def test_history_tells_each_slot_and_why(w: World) -> None:
    await _story(w)
    async with client(w.app) as http:
        response = await http.get("/api/v1/schedules/cleanup/history", headers=VIEWER)
    assert response.status_code == 200
    body = response.json()
    assert body["next_run_at"] is None and body["state"].startswith("disabled")
    kinds = [(e["kind"], e.get("outcome") or e.get("event")) for e in body["entries"]]
    assert kinds == [
        ("change", "ScheduleDisabled"),
        ("slot", "dead"),
        ("missed", None),
        ("slot", "ran"),
        ("change", "ScheduleDeclared"),
    ]
    disabled, dead, missed, ran, _declared = body["entries"]
    assert disabled["actor"] == {"id": "alice", "via": "http", "role": "admin"}
    assert dead["slot"] == "2026-03-02T09:50:00.000Z" and dead["detail"] == "disk full"
    assert missed["dropped"] == 3 and missed["reason"] == "missed"
    assert missed["first_slot"] == "2026-03-02T09:20:00.000Z"
    assert "no pod ticked them in time" in missed["detail"]
    assert ran["slot"] == "2026-03-02T09:10:00.000Z" and len(ran["versions"]) == 2
    assert body["counts"] == {"ran": 1, "skipped": 0, "dead": 1, "missed": 3, "other": 0}


async def test_history_pages_back_through_the_stream(w: World) -> None:
    await _story(w)
    seen: list[int] = []
    before: int | None = None
    async with client(w.app) as http:
        while True:
            query = f"?limit=2&before={before}" if before else "?limit=2"
            body = (
                await http.get(f"/api/v1/schedules/cleanup/history{query}", headers=ADMIN)
            ).json()
            versions = [v for e in body["entries"] for v in e["versions"]]
            assert len(versions) <= 2
            seen += versions
            before = body["next"]
            if before is None:
                break
    row = await w.store.admin.get_schedule("cleanup")
    assert row is not None and sorted(seen) == list(range(1, row.stream_version + 1))
    # v2 is the 09:10 slot's enqueue, its ScheduleSlotRan is v3: in a page that stops
    # before v3 the slot is settled from its job (run_slot was called without the lane,
    # so the job is still PENDING)
    async with client(w.app) as http:
        body = (
            await http.get("/api/v1/schedules/cleanup/history?limit=1&before=3", headers=ADMIN)
        ).json()
    (entry,) = body["entries"]
    assert entry["versions"] == [2] and entry["outcome"] == "pending"


async def test_history_refuses_unknown_and_malformed(w: World) -> None:
    async with client(w.app) as http:
        for path, status in (
            ("/api/v1/schedules/nope/history", 404),
            ("/api/v1/schedules/a%00b/history", 404),
            ("/api/v1/schedules/cleanup/history?limit=0", 400),
            ("/api/v1/schedules/cleanup/history?before=x", 400),
            ("/api/v1/schedules/cleanup/history?zzz=1", 400),
        ):
            assert (await http.get(path, headers=VIEWER)).status_code == status, path
        assert (await http.get("/api/v1/schedules/cleanup/history")).status_code == 401


async def test_history_page(w: World) -> None:
    await _story(w)
    async with client(w.app) as http:
        await login(http, ADMIN_KEY)
        listing = (await http.get("/admin/schedules")).text
        page = await http.get("/admin/schedules/cleanup")
        older = await http.get("/admin/schedules/cleanup?limit=2")
        missing = await http.get("/admin/schedules/nope")
        bad = await http.get("/admin/schedules/a%00b")
    assert 'href="/admin/schedules/cleanup"' in listing
    assert page.status_code == 200
    outcomes = re.findall(r'data-kind="(\w+)"[^>]*data-(?:outcome|event)="(\w+)"', page.text)
    assert outcomes == [
        ("change", "ScheduleDisabled"),
        ("slot", "dead"),
        ("missed", "missed"),
        ("slot", "ran"),
        ("change", "ScheduleDeclared"),
    ]
    assert "disk full" in page.text and "3 missed" in page.text
    assert re.search(r'id="next-run">—', page.text)
    assert 'rel="next"' in older.text
    assert missing.status_code == 404 and bad.status_code == 404
