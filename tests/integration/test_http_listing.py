"""`GET /api/v1/jobs` over every store: keyset cursors walk the whole filtered set in
both directions without gaps or repeats, and the total is counted only up to the cap
(`total_capped`), while the reference contract's fields and `page` keep working."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from jobledger.core.clock import FakeClock
from jobledger.http.queries import open_jobs
from jobledger.storage.port import JobFilter, Store
from tests.unit.http_helpers import ADMIN, client, world


async def _get(http: httpx.AsyncClient, **params: Any) -> dict[str, Any]:
    response = await http.get("/api/v1/jobs", params=params, headers=ADMIN)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_cursors_walk_every_row_both_ways(store: Store, clock: FakeClock) -> None:
    async with world(store, clock) as w, client(w.app) as http:
        ids = []
        for n in range(7):
            ids.append(await w.enqueue(key=f"k{n}"))
            clock.advance(milliseconds=1)
        other = await w.dead("kafka:orders", key="x")
        newest_first = ids[::-1]

        first = await _get(http, target="mail:welcome", limit=3)
        assert [r["_id"] for r in first["data"]] == newest_first[:3]
        assert first["prev"] is None and first["next"] == newest_first[2]
        assert first["total"] == 7 and first["total_capped"] is False and first["page"] == 1

        seen, page = [], first
        while True:
            seen += [r["_id"] for r in page["data"]]
            if page["next"] is None:
                break
            page = await _get(http, target="mail:welcome", limit=3, before=page["next"])
        assert seen == newest_first and other not in seen
        assert [r["_id"] for r in page["data"]] == newest_first[6:]

        back = []
        while page["prev"] is not None:
            page = await _get(http, target="mail:welcome", limit=3, after=page["prev"])
            back = [r["_id"] for r in page["data"]] + back
        assert back == newest_first[:6]
        assert [r["_id"] for r in page["data"]] == newest_first[:3]  # newest first again

        between = await _get(http, after=ids[1], before=ids[6], limit=3)
        assert [r["_id"] for r in between["data"]] == [ids[4], ids[3], ids[2]]

        offset_page = await _get(http, target="mail:welcome", limit=3, page=2)
        assert [r["_id"] for r in offset_page["data"]] == newest_first[3:6]
        assert offset_page["prev"] == newest_first[3] and offset_page["next"] == newest_first[5]


async def test_total_is_capped_and_says_so(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(open_jobs, "COUNT_CAP", 4)
    async with world(store, clock) as w, client(w.app) as http:
        for n in range(6):
            await w.enqueue(key=f"k{n}")
            clock.advance(milliseconds=1)
        await w.dead("kafka:orders", key="x")
        body = await _get(http, limit=2)
        assert body["total"] == 4 and body["total_capped"] is True
        assert len(body["data"]) == 2
        exact = await _get(http, status="DEAD")
        assert exact["total"] == 1 and exact["total_capped"] is False


async def test_a_capped_total_is_kept_and_an_exact_one_read_each_call(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(open_jobs, "COUNT_CAP", 4)
    monkeypatch.setattr(open_jobs, "CAPPED_KEPT_S", 3600.0)
    async with world(store, clock) as w, client(w.app) as http:
        ids = [await w.enqueue(key=f"k{n}") for n in range(6)]
        assert (await _get(http, target="mail:welcome"))["total_capped"] is True
        for job_id in ids[:3]:
            cancel = await http.post(f"/api/v1/jobs/{job_id}/cancel", headers=ADMIN)
            assert cancel.status_code == 200, cancel.text
        # within CAPPED_KEPT_S the capped total is not read again; the page is
        kept = await _get(http, target="mail:welcome")
        assert kept["total"] == 4 and kept["total_capped"] is True
        assert sorted(r["_id"] for r in kept["data"]) == sorted(ids[3:])
        # another filter has its own total, and one under the cap is exact every call
        assert (await _get(http, target="mail:welcome", status="PENDING"))["total"] == 3
        await w.enqueue(key="k6")
        assert (await _get(http, target="mail:welcome", status="PENDING"))["total"] == 4
        # once CAPPED_KEPT_S is over the total is read: exact again below the cap
        monkeypatch.setattr(open_jobs, "CAPPED_KEPT_S", 0.0)
        fresh = await _get(http, target="mail:welcome")
        assert fresh["total"] == 4 and fresh["total_capped"] is False
        assert (await open_jobs.capped_count(store, JobFilter(target="mail:welcome"))) == (4, False)


@pytest.mark.parametrize(
    "params",
    [
        {"before": "zz"},
        {"after": "0" * 31},
        {"before": "0" * 32 + "\n"},
        {"after": "F" * 32},
    ],
)
async def test_malformed_cursors_are_400(
    store: Store, clock: FakeClock, params: dict[str, str]
) -> None:
    async with world(store, clock) as w, client(w.app) as http:
        response = await http.get("/api/v1/jobs", params=params, headers=ADMIN)
        assert response.status_code == 400, response.text
        assert response.json()["code"] == "validation_failed"
