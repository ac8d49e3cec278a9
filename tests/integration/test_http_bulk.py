"""Bulk retry and skip of DEAD jobs over every store: only DEAD jobs matching the filter
move, each with its own event under the admin as actor and one trace id, a repeat
changes nothing, a stale confirmation (`expect`) changes nothing, and `limit` leaves
the rest for the next call."""

from __future__ import annotations

from typing import Any

import httpx

from jobledger.core.clock import FakeClock
from jobledger.domain import jobs
from jobledger.domain.events import EventType
from jobledger.domain.jobs import JobStatus
from jobledger.storage.port import Store
from tests.unit.http_helpers import ADMIN, VIEWER, World, client, world


async def _post(http: httpx.AsyncClient, path: str, **params: Any) -> httpx.Response:
    return await http.post(f"/api/v1/bulk/{path}", params=params, headers=ADMIN)


async def _last_event(w: World, job_id: str) -> Any:
    return (await w.store.log.read_stream(jobs.job_stream(job_id)))[-1]


async def test_bulk_retry_moves_only_matching_dead_jobs(store: Store, clock: FakeClock) -> None:
    async with world(store, clock) as w, client(w.app) as http:
        dead = [await w.dead(key=f"k{n}") for n in range(3)]
        other_dead = await w.dead("kafka:orders", key="x")
        pending = await w.enqueue(key="p")
        response = await _post(http, "retry", target="mail:welcome")
        assert response.status_code == 200, response.text
        assert response.json() == {
            "action": "retry",
            "matched": 3,
            "changed": 3,
            "conflicts": 0,
            "more": False,
        }
        traces = set()
        for job_id in dead:
            row = await w.job(job_id)
            assert row.status == JobStatus.PENDING and row.attempts == 0
            event = await _last_event(w, job_id)
            assert event.type == EventType.JOB_RETRIED
            assert event.actor is not None and (event.actor.id, event.actor.via) == (
                "alice",
                "http",
            )
            traces.add(event.trace_id)
        assert len(traces) == 1 and None not in traces  # one bulk action, one trace
        assert (await w.job(other_dead)).status == JobStatus.DEAD
        assert (await _last_event(w, pending)).type == EventType.JOB_ENQUEUED

        again = await _post(http, "retry", target="mail:welcome")
        assert again.json()["matched"] == 0 and again.json()["changed"] == 0
        for job_id in dead:
            assert (await _last_event(w, job_id)).type == EventType.JOB_RETRIED


async def test_bulk_skip_checks_the_confirmed_count(store: Store, clock: FakeClock) -> None:
    async with world(store, clock) as w, client(w.app) as http:
        dead = [await w.dead("kafka:orders", code="orders", key=f"k{n}") for n in range(2)]
        kept = await w.dead(key="other")
        stale = await _post(http, "skip", code="orders", expect=3)
        assert stale.status_code == 409 and stale.json()["code"] == "invalid_status"
        assert "2 DEAD jobs match now, not the 3 confirmed" in stale.json()["message"][0]
        assert [(await w.job(j)).status for j in dead] == [JobStatus.DEAD] * 2

        done = await _post(http, "skip", code="orders", expect=2)
        assert done.status_code == 200 and done.json()["changed"] == 2
        for job_id in dead:
            assert await w.store.admin.get_job(job_id) is None
            event = await _last_event(w, job_id)
            assert event.type == EventType.JOB_SKIPPED and event.data["reason"] == "admin"
            assert event.actor is not None and event.actor.id == "alice"
        assert (await w.job(kept)).status == JobStatus.DEAD
        empty = await _post(http, "skip", code="orders", expect=0)
        assert empty.status_code == 200 and empty.json()["matched"] == 0


async def test_bulk_limit_leaves_the_rest_for_the_next_call(store: Store, clock: FakeClock) -> None:
    async with world(store, clock) as w, client(w.app) as http:
        dead = []
        for n in range(3):
            dead.append(await w.dead(key=f"k{n}"))
            clock.advance(milliseconds=1)
        first = (await _post(http, "retry", limit=2)).json()
        assert (first["matched"], first["changed"], first["more"]) == (2, 2, True)
        assert (await w.job(dead[0])).status == JobStatus.DEAD  # newest first
        second = (await _post(http, "retry", limit=2)).json()
        assert (second["matched"], second["changed"], second["more"]) == (1, 1, False)
        assert (await w.job(dead[0])).status == JobStatus.PENDING


async def test_bulk_needs_an_admin_and_known_parameters(store: Store, clock: FakeClock) -> None:
    async with world(store, clock) as w, client(w.app) as http:
        job_id = await w.dead()
        viewer = await http.post("/api/v1/bulk/retry", headers=VIEWER)
        assert viewer.status_code == 403
        for params in ({"status": "DEAD"}, {"expect": "-1"}, {"limit": "0"}, {"key": "a\x00"}):
            response = await http.post("/api/v1/bulk/skip", params=params, headers=ADMIN)
            assert response.status_code == 400, (params, response.text)
        assert (await w.job(job_id)).status == JobStatus.DEAD
