"""`GET /api/v1/finished` over every store: jobs that left the queue, newest first from
the log, filtered by status, target, code and key, found by id or dedupe key, paged
back by log position, and bounded by the scan limit."""

from __future__ import annotations

from typing import Any

import httpx

from jobledger.core.clock import FakeClock
from jobledger.http.queries import finished_jobs
from jobledger.storage.port import Store
from tests.contract.helpers import succeed
from tests.unit.http_helpers import ADMIN, World, client, world


async def _get(http: httpx.AsyncClient, **params: Any) -> dict[str, Any]:
    response = await http.get("/api/v1/finished", params=params, headers=ADMIN)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def _succeeded(w: World, **kw: Any) -> str:
    job_id = await w.enqueue(**kw)
    assert await w.store.writes.apply([succeed(await w.job(job_id), w.clock)]) == [True]
    return job_id


async def _ids(http: httpx.AsyncClient, **params: Any) -> list[str]:
    return [row["_id"] for row in (await _get(http, **params))["data"]]


async def test_finished_jobs_newest_first_with_how_they_ended(
    store: Store, clock: FakeClock
) -> None:
    async with world(store, clock) as w, client(w.app) as http:
        ok = await _succeeded(w, key="a", dedupe_key="order-1")
        clock.advance(seconds=1)
        skipped = await w.dead("kafka:orders", key="b", code="orders")
        assert (await http.post(f"/api/v1/jobs/{skipped}/skip", headers=ADMIN)).status_code == 200
        clock.advance(seconds=1)
        cancelled = await w.enqueue(key="c")
        assert (
            await http.post(f"/api/v1/jobs/{cancelled}/cancel", headers=ADMIN)
        ).status_code == 200
        still_open = await w.enqueue(key="d")

        body = await _get(http)
        assert [r["_id"] for r in body["data"]] == [cancelled, skipped, ok]
        assert [r["status"] for r in body["data"]] == ["CANCELLED", "SKIPPED", "SUCCEEDED"]
        assert body["next"] is None and body["scanned"] > 0
        skip_row = body["data"][1]
        assert skip_row["code"] == "orders" and skip_row["key"] == "b"
        assert skip_row["ended"]["type"] == "JobSkipped"
        assert skip_row["ended"]["reason"] == "admin"
        assert skip_row["ended"]["actor"]["id"] == "alice"
        assert skip_row["closed_at"] == skip_row["ended"]["at"] is not None
        # its one run, the one that succeeded, counted
        assert body["data"][2]["attempts"] == 1 and "payload" not in body["data"][2]

        assert await _ids(http, status="SKIPPED") == [skipped]
        assert await _ids(http, target="kafka:orders") == [skipped]
        assert await _ids(http, code="mail:welcome") == [cancelled, ok]
        assert await _ids(http, key="a") == [ok]
        assert await _ids(http, key="a", status="CANCELLED") == []
        assert await _ids(http, id=ok) == [ok]
        assert await _ids(http, dedupe_key="order-1") == [ok]
        assert await _ids(http, dedupe_key="nobody") == []
        assert await _ids(http, id=still_open) == []
        assert await _ids(http, id="not-an-id") == []


async def test_pages_back_by_log_position_within_the_scan_limit(
    store: Store, clock: FakeClock
) -> None:
    async with world(store, clock) as w, client(w.app) as http:
        done = []
        for n in range(4):
            done.append(await _succeeded(w, key=f"k{n}"))
            clock.advance(milliseconds=1)
        seen, before = [], None
        while True:
            params: dict[str, Any] = {"limit": 1} | ({"before": before} if before else {})
            page = await _get(http, **params)
            seen += [r["_id"] for r in page["data"]]
            before = page["next"]
            if before is None:
                break
        assert seen == done[::-1]

        rare = await _succeeded(w, target="kafka:orders", key="rare")
        for n in range(3):
            await _succeeded(w, key=f"later{n}")
        page = await finished_jobs.browse(
            store, finished_jobs.FinishedFilter(target="kafka:orders"), limit=5, scan=4
        )  # the newest 4 events: the later jobs' enqueued and succeeded events
        assert page.rows == [] and page.scanned == 4 and page.next is not None
        rest = await finished_jobs.browse(
            store, finished_jobs.FinishedFilter(target="kafka:orders"), before=page.next, scan=4
        )
        assert [r.job.id for r in rest.rows] == [rare]


async def test_finished_validation(store: Store, clock: FakeClock) -> None:
    async with world(store, clock) as w, client(w.app) as http:
        for params in ({"status": "DEAD"}, {"before": "0"}, {"limit": "101"}, {"key": "a\x00"}):
            response = await http.get("/api/v1/finished", params=params, headers=ADMIN)
            assert response.status_code == 400, (params, response.text)
        hint = await http.get("/api/v1/jobs", params={"status": "SUCCEEDED"}, headers=ADMIN)
        assert hint.status_code == 400 and "/api/v1/finished" in hint.text
