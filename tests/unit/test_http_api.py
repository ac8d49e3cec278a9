"""The admin API over a real store: every route, status code and error body."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jobledger.core.clock import FakeClock
from jobledger.domain import job_commands, jobs
from jobledger.domain.events import EventType
from jobledger.domain.timeutil import iso
from jobledger.storage.memory import MemoryStore
from jobledger.storage.memory.admin import MemoryAdmin
from tests.stores import make_store
from tests.unit.http_helpers import ADMIN, VIEWER, World, client, world


@pytest.fixture(params=["memory", "sqlite"])
async def w(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> AsyncIterator[World]:
    """The API over the in-memory store and over a real SQLite file."""
    async with make_store(request.param, tmp_path) as store, world(store, clock) as built:
        yield built


def assert_error(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"statusCode", "code", "message"}
    assert body["statusCode"] == status
    assert body["code"] == code
    assert isinstance(body["message"], list) and body["message"]
    assert all(isinstance(m, str) for m in body["message"])


# --- GET /jobs ----------------------------------------------------------------------------


async def test_list_newest_first_without_payload(w: World) -> None:
    first = await w.enqueue(key="k1", payload={"secret": 1})
    w.clock.advance(seconds=1)
    second = await w.dead("kafka:orders", key="k2", code="orders")
    async with client(w.app) as http:
        response = await http.get("/api/v1/jobs", headers=ADMIN)
    assert response.status_code == 200
    body = response.json()
    assert body["total"] == 2 and body["page"] == 1 and body["limit"] == 100
    assert [row["_id"] for row in body["data"]] == [second, first]
    assert all("payload" not in row for row in body["data"])
    row = body["data"][1]
    assert row["status"] == "PENDING" and row["attempts"] == 0 and row["key"] == "k1"
    assert row["code"] == "mail:welcome" and row["target"] == "mail:welcome"
    assert row["lane"] == "fast" and row["next_run_at"] == iso(w.clock.now().replace(second=0))
    assert body["data"][0]["status"] == "DEAD" and body["data"][0]["closed_at"] is not None


async def test_list_filters_and_paging(w: World) -> None:
    ids = []
    for i in range(5):
        ids.append(await w.enqueue(key=f"k{i}"))
        w.clock.advance(milliseconds=1)  # ids are time-ordered to the millisecond
    dead = await w.dead("kafka:orders", key="k9", code="orders")
    async with client(w.app) as http:

        async def get(**params: Any) -> dict[str, Any]:
            response = await http.get("/api/v1/jobs", params=params, headers=ADMIN)
            assert response.status_code == 200, response.text
            body: dict[str, Any] = response.json()
            return body

        assert [r["_id"] for r in (await get(status="DEAD"))["data"]] == [dead]
        assert (await get(status="PENDING"))["total"] == 5
        assert (await get(status="RUNNING"))["total"] == 0
        assert [r["_id"] for r in (await get(target="kafka:orders"))["data"]] == [dead]
        assert [r["_id"] for r in (await get(code="orders"))["data"]] == [dead]
        assert [r["_id"] for r in (await get(key="k3"))["data"]] == [ids[3]]
        assert (await get(key="nope"))["total"] == 0
        page2 = await get(status="PENDING", limit=2, page=2)
        assert page2["total"] == 5 and page2["page"] == 2 and page2["limit"] == 2
        assert [r["_id"] for r in page2["data"]] == [ids[2], ids[1]]
        assert [r["_id"] for r in (await get(limit=2, page=4))["data"]] == []


@pytest.mark.parametrize(
    "params",
    [
        {"status": "FINISHED"},
        {"status": "pending"},
        {"page": "0"},
        {"page": "-1"},
        {"page": "abc"},
        {"page": "1.5"},
        {"page": "99999999999999999999999"},
        {"limit": "0"},
        {"limit": "101"},
        {"limit": "ten"},
    ],
)
async def test_list_validation(w: World, params: dict[str, str]) -> None:
    async with client(w.app) as http:
        response = await http.get("/api/v1/jobs", params=params, headers=ADMIN)
    assert_error(response, 400, "validation_failed")


# --- retry, skip, cancel -------------------------------------------------------------------


async def test_retry_dead_job(w: World) -> None:
    job_id = await w.dead(payload={"x": 1})
    w.clock.advance(minutes=5)
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    headers = {**ADMIN, "traceparent": f"00-{trace}-00f067aa0ba902b7-01"}
    async with client(w.app) as http:
        response = await http.post(f"/api/v1/jobs/{job_id}/retry", headers=headers)
    assert response.status_code == 200, response.text
    row = response.json()
    assert row["_id"] == job_id and row["status"] == "PENDING" and row["attempts"] == 0
    assert row["next_run_at"] == iso(w.clock.now())
    assert row["closed_at"] is None and row["claim_token"] is None and "payload" not in row
    assert response.headers["x-trace-id"] == trace
    assert (await w.job(job_id)).status == jobs.JobStatus.PENDING
    last = (await w.store.log.read_stream(jobs.job_stream(job_id)))[-1]
    assert last.type == EventType.JOB_RETRIED
    assert last.actor is not None and last.actor.to_json() == {
        "id": "alice",
        "via": "http",
        "role": "admin",
    }
    assert last.trace_id == trace


async def test_retry_and_skip_refuse_rows_that_are_not_dead(w: World) -> None:
    pending = await w.enqueue()
    running = await w.running()
    async with client(w.app) as http:
        for job_id in (pending, running):
            for action in ("retry", "skip"):
                response = await http.post(f"/api/v1/jobs/{job_id}/{action}", headers=ADMIN)
                assert_error(response, 409, "invalid_status")


@pytest.mark.parametrize("action", ["retry", "skip", "cancel"])
@pytest.mark.parametrize("job_id", ["0" * 32, "not-an-id", "ABCDEF" * 5 + "00", "1" * 33])
async def test_unknown_or_malformed_id_is_404(w: World, action: str, job_id: str) -> None:
    async with client(w.app) as http:
        response = await http.post(f"/api/v1/jobs/{job_id}/{action}", headers=ADMIN)
        assert_error(response, 404, "not_found")
        assert_error(await http.get(f"/api/v1/jobs/{job_id}", headers=ADMIN), 404, "not_found")


async def test_skip_dead_job(w: World) -> None:
    job_id = await w.dead()
    async with client(w.app) as http:
        response = await http.post(f"/api/v1/jobs/{job_id}/skip", headers=ADMIN)
        assert response.status_code == 200
        assert response.json() == {"_id": job_id, "skipped": True}
        assert await w.store.admin.get_job(job_id) is None
        again = await http.post(f"/api/v1/jobs/{job_id}/skip", headers=ADMIN)
        assert_error(again, 404, "not_found")
    last = (await w.store.log.read_stream(jobs.job_stream(job_id)))[-1]
    assert last.type == EventType.JOB_SKIPPED and last.data == {"reason": "admin"}
    assert last.actor is not None and last.actor.id == "alice"


async def test_cancel_pending_only(w: World) -> None:
    pending = await w.enqueue()
    running = await w.running()
    inflight = await w.inflight()
    dead = await w.dead()
    async with client(w.app) as http:
        response = await http.post(f"/api/v1/jobs/{pending}/cancel", headers=ADMIN)
        assert response.status_code == 200
        assert response.json() == {"_id": pending, "cancelled": True}
        for job_id in (running, inflight, dead):
            response = await http.post(f"/api/v1/jobs/{job_id}/cancel", headers=ADMIN)
            assert_error(response, 409, "invalid_status")
    assert await w.store.admin.get_job(pending) is None
    last = (await w.store.log.read_stream(jobs.job_stream(pending)))[-1]
    assert last.type == EventType.JOB_CANCELLED and last.actor is not None
    assert last.actor.via == "http"


class RacingAdmin(MemoryAdmin):
    """Admin reads where another admin retries the row right after we read it."""

    def __init__(self, store: RacingStore) -> None:
        super().__init__(store.tables)
        self.store = store

    async def get_job(self, job_id: str) -> jobs.Job | None:
        row = await super().get_job(job_id)
        store = self.store
        if store.race and row is not None:
            store.race = False
            competing = job_commands.retry(row, jobs.Stamp(store.clock.now()))
            assert await store.writes.apply([competing]) == [True]
        return row


class RacingStore(MemoryStore):
    """A memory store where another admin retries the row right after we read it."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.race = False
        self.admin = RacingAdmin(self)


async def test_lost_race_is_409(clock: FakeClock) -> None:
    store = RacingStore(clock)
    async with world(store, clock) as w:
        job_id = await w.dead()
        store.race = True
        async with client(w.app) as http:
            response = await http.post(f"/api/v1/jobs/{job_id}/retry", headers=ADMIN)
        assert_error(response, 409, "invalid_status")
        assert "changed meanwhile" in response.json()["message"][0]
        # exactly one JobRetried: the competing one
        stream = await store.log.read_stream(jobs.job_stream(job_id))
        assert [e.type for e in stream].count(EventType.JOB_RETRIED) == 1


# --- detail --------------------------------------------------------------------------------


async def test_job_detail_with_payload_and_history(w: World) -> None:
    job_id = await w.dead(payload={"order": 42}, key="o-42")
    async with client(w.app) as http:
        response = await http.get(f"/api/v1/jobs/{job_id}", headers=VIEWER)
        assert response.status_code == 200
        body = response.json()
        assert body["payload"] == {"order": 42} and body["status"] == "DEAD" and body["open"]
        assert [e["type"] for e in body["history"]] == ["JobEnqueued", "JobDead"]
        assert body["history"][1]["data"]["reason"] == "dead_now"
        assert [e["version"] for e in body["history"]] == [1, 2]
        await http.post(f"/api/v1/jobs/{job_id}/skip", headers=ADMIN)
        closed = (await http.get(f"/api/v1/jobs/{job_id}", headers=VIEWER)).json()
    assert closed["status"] == "SKIPPED" and closed["open"] is False
    assert closed["payload"] == {"order": 42}
    assert [e["type"] for e in closed["history"]] == ["JobEnqueued", "JobDead", "JobSkipped"]


# --- schedules -----------------------------------------------------------------------------


async def test_schedules_list_sorted_by_code(w: World) -> None:
    async with client(w.app) as http:
        response = await http.get("/api/v1/schedules", headers=VIEWER)
    assert response.status_code == 200
    rows = response.json()
    assert [r["code"] for r in rows] == ["cleanup", "nightly_report"]
    nightly = rows[1]
    assert nightly["cron"] == "0 2 * * *" and nightly["enabled"] is True
    assert nightly["cron_override"] is None and nightly["next_run_at"] is not None
    assert isinstance(nightly["retry_count"], int)


async def test_schedule_enable_disable_override(w: World) -> None:
    async with client(w.app) as http:
        off = await http.post("/api/v1/schedules/nightly_report/disable", headers=ADMIN)
        assert off.status_code == 200 and off.json()["enabled"] is False
        on = await http.post("/api/v1/schedules/nightly_report/enable", headers=ADMIN)
        assert on.status_code == 200 and on.json()["enabled"] is True
        put = await http.put(
            "/api/v1/schedules/nightly_report/cron_override",
            json={"cron_override": "30 3 * * *"},
            headers=ADMIN,
        )
        assert put.status_code == 200, put.text
        assert put.json()["cron_override"] == "30 3 * * *"
        assert put.json()["effective_cron"] == "30 3 * * *"
        assert put.json()["next_run_at"].endswith("03:30:00.000Z")
        cleared = await http.delete("/api/v1/schedules/nightly_report/cron_override", headers=ADMIN)
        assert cleared.status_code == 200 and cleared.json()["cron_override"] is None
    stream = await w.store.log.read_stream("schedule:nightly_report")
    admin_events = [e for e in stream if e.actor is not None and e.actor.via == "http"]
    assert [e.type for e in admin_events] == [
        EventType.SCHEDULE_DISABLED,
        EventType.SCHEDULE_ENABLED,
        EventType.SCHEDULE_OVERRIDE_SET,
        EventType.SCHEDULE_OVERRIDE_CLEARED,
    ]
    assert all(e.actor is not None and e.actor.id == "alice" for e in admin_events)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"cron_override": "not a cron"}, "invalid_cron"),
        ({"cron_override": "61 * * * *"}, "invalid_cron"),
        ({"cron_override": ""}, "invalid_cron"),
        ({"cron_override": 5}, "validation_failed"),
        ({}, "validation_failed"),
        ([], "validation_failed"),
        (None, "validation_failed"),
    ],
)
async def test_override_validation(w: World, body: Any, code: str) -> None:
    async with client(w.app) as http:
        kwargs: dict[str, Any] = {"json": body} if body is not None else {"content": b"{oops"}
        response = await http.put(
            "/api/v1/schedules/nightly_report/cron_override", headers=ADMIN, **kwargs
        )
    assert_error(response, 400, code)


async def test_unknown_schedule_is_404(w: World) -> None:
    async with client(w.app) as http:
        calls: list[tuple[str, str, Any]] = [
            ("POST", "/enable", None),
            ("POST", "/disable", None),
            ("PUT", "/cron_override", {"cron_override": "* * * * *"}),
            ("DELETE", "/cron_override", None),
        ]
        for method, path, body in calls:
            response = await http.request(
                method, f"/api/v1/schedules/nope{path}", headers=ADMIN, json=body
            )
            assert_error(response, 404, "not_found")


# --- auth ----------------------------------------------------------------------------------

WRITES = [
    ("POST", "/api/v1/jobs/{id}/retry", None),
    ("POST", "/api/v1/jobs/{id}/skip", None),
    ("POST", "/api/v1/jobs/{id}/cancel", None),
    ("POST", "/api/v1/schedules/nightly_report/enable", None),
    ("POST", "/api/v1/schedules/nightly_report/disable", None),
    ("PUT", "/api/v1/schedules/nightly_report/cron_override", {"cron_override": "* * * * *"}),
    ("DELETE", "/api/v1/schedules/nightly_report/cron_override", None),
]
READS = [
    "/api/v1/jobs",
    "/api/v1/jobs/{id}",
    "/api/v1/schedules",
    "/api/v1/stats",
    "/api/v1/events",
]


async def test_anonymous_and_bad_keys_get_401_everywhere(w: World) -> None:
    job_id = await w.dead()
    bad = [
        {},
        {"Authorization": "Bearer wrong-key-123"},
        {"Authorization": "Basic YTpi"},
        {"Authorization": "Bearer "},
    ]
    async with client(w.app) as http:
        for headers in bad:
            for method, path, body in WRITES:
                response = await http.request(
                    method, path.format(id=job_id), json=body, headers=headers
                )
                assert_error(response, 401, "unauthorized")
                assert response.headers["www-authenticate"].startswith("Bearer")
            for path in READS:
                assert_error(
                    await http.get(path.format(id=job_id), headers=headers), 401, "unauthorized"
                )
    assert (await w.job(job_id)).status == jobs.JobStatus.DEAD


async def test_viewer_reads_but_gets_403_on_every_write(w: World) -> None:
    job_id = await w.dead()
    async with client(w.app) as http:
        for method, path, body in WRITES:
            response = await http.request(method, path.format(id=job_id), json=body, headers=VIEWER)
            assert_error(response, 403, "forbidden")
        for path in READS:
            response = await http.get(path.format(id=job_id), headers=VIEWER)
            assert response.status_code == 200, (path, response.text)
    assert (await w.job(job_id)).status == jobs.JobStatus.DEAD
    row = await w.store.admin.get_schedule("nightly_report")
    assert row is not None and row.enabled and row.cron_override is None


# --- feed, stats, health, errors -------------------------------------------------------------


async def test_events_feed_pages_by_position(w: World) -> None:
    for _ in range(3):
        await w.enqueue()
    async with client(w.app) as http:
        total = len(w.store.tables.events) if isinstance(w.store, MemoryStore) else None
        first = (await http.get("/api/v1/events", params={"limit": 2}, headers=VIEWER)).json()
        assert len(first["data"]) == 2 and first["after"] == 0 and first["limit"] == 2
        positions = [e["position"] for e in first["data"]]
        assert positions == sorted(positions) and first["next"] == positions[-1]
        seen = positions
        cursor = first["next"]
        while True:
            page = (
                await http.get(
                    "/api/v1/events", params={"after": cursor, "limit": 2}, headers=VIEWER
                )
            ).json()
            if not page["data"]:
                assert page["next"] == cursor
                break
            seen += [e["position"] for e in page["data"]]
            cursor = page["next"]
        assert seen == sorted(set(seen))
        if total is not None:
            assert len(seen) == total
        event = first["data"][0]
        assert {"stream", "version", "type", "data", "at", "hash", "prev_hash"} <= set(event)
        for params in ({"after": "-1"}, {"limit": "0"}, {"limit": "1001"}, {"after": "x"}):
            assert_error(
                await http.get("/api/v1/events", params=params, headers=VIEWER),
                400,
                "validation_failed",
            )


async def test_stats(w: World) -> None:
    await w.enqueue()
    await w.enqueue("kafka:orders")
    await w.dead()
    await w.running()
    async with client(w.app) as http:
        response = await http.get("/api/v1/stats", headers=VIEWER)
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["by_status"] == {"PENDING": 2, "RUNNING": 1, "DEAD": 1}
        assert body["queue"]["mail:welcome"]["pending"] == 1
        assert body["queue"]["mail:welcome"]["dead"] == 1
        assert body["totals"]["dead"] == 1
        assert any(r["target"] == "mail:welcome" and r["dead"] == 1 for r in body["hours"])
        assert_error(
            await http.get("/api/v1/stats", params={"hours": "0"}, headers=VIEWER),
            400,
            "validation_failed",
        )


async def test_health_and_readiness_need_no_key(w: World) -> None:
    async with client(w.app) as http:
        health = await http.get("/healthz")
        assert health.status_code == 200 and health.json() == {"status": "ok"}
        ready = await http.get("/readyz")
        assert ready.status_code == 200 and ready.json()["status"] == "ready"


class BrokenAdmin(MemoryAdmin):
    """Admin reads that fail, as a database that went away."""

    async def list_jobs(self, flt: Any, *, offset: int, limit: int) -> Any:
        raise RuntimeError("connection to db-7.internal:5432 lost; password=hunter2")

    async def get_job(self, job_id: str) -> Any:
        raise OSError("connection refused")


class BrokenStore(MemoryStore):
    """A store whose reads fail, as a database that went away."""

    def __init__(self) -> None:
        super().__init__()
        self.admin = BrokenAdmin(self.tables)


async def test_unexpected_error_is_500_without_details(clock: FakeClock) -> None:
    async with world(BrokenStore(), clock) as w, client(w.app) as http:
        response = await http.get("/api/v1/jobs", headers=ADMIN)
        assert_error(response, 500, "internal_error")
        assert "hunter2" not in response.text and "Traceback" not in response.text
        ready = await http.get("/readyz")
        assert_error(ready, 503, "not_ready")


async def test_unknown_route_and_wrong_method(w: World) -> None:
    async with client(w.app) as http:
        assert_error(await http.get("/api/v1/nothing", headers=ADMIN), 404, "not_found")
        wrong = await http.delete("/api/v1/jobs", headers=ADMIN)
        assert_error(wrong, 405, "method_not_allowed")
        assert "GET" in wrong.headers["allow"]


async def test_unknown_query_parameters_are_refused(w: World) -> None:
    async with client(w.app) as http:
        response = await http.get("/api/v1/jobs", params={"stauts": "DEAD"}, headers=ADMIN)
        assert_error(response, 400, "validation_failed")
        assert response.json()["message"] == ["property stauts should not exist"]
        job_id = await w.dead()
        response = await http.post(f"/api/v1/jobs/{job_id}/retry?force=1", headers=ADMIN)
        assert_error(response, 400, "validation_failed")
    assert (await w.job(job_id)).status == jobs.JobStatus.DEAD


async def test_405_lists_every_method_of_the_resource(w: World) -> None:
    async with client(w.app) as http:
        response = await http.post("/api/v1/schedules/cleanup/cron_override", headers=ADMIN)
    assert_error(response, 405, "method_not_allowed")
    assert set(response.headers["allow"].split(", ")) == {"PUT", "DELETE"}
