"""The admin page's server side: login, cookies, CSRF, roles, commands and flashes."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import httpx
import pytest

from jobledger.core.clock import FakeClock
from jobledger.domain import job_outcomes, jobs
from jobledger.domain.events import EventType
from jobledger.http.queries import open_jobs
from jobledger.storage.memory import MemoryStore
from tests.unit.http_helpers import (
    ADMIN_KEY,
    VIEWER_KEY,
    World,
    client,
    sign_in,
    signin_form,
    world,
)


@pytest.fixture
async def w(clock: FakeClock) -> AsyncIterator[World]:
    async with world(MemoryStore(), clock) as built:
        yield built


async def login(http: httpx.AsyncClient, key: str) -> str:
    """Sign in through the form; return the page's CSRF token."""
    await sign_in(http, key)
    page = await http.get("/admin")
    assert page.status_code == 200
    match = re.search(r'name="csrf-token" content="([0-9a-f]+)"', page.text)
    return match.group(1) if match else ""


async def test_pages_need_a_login(w: World) -> None:
    async with client(w.app) as http:
        for path in ("/admin", "/admin/schedules", f"/admin/jobs/{'0' * 32}"):
            response = await http.get(path)
            assert response.status_code == 303
            assert response.headers["location"].startswith("/admin/login?next=")
        form = await signin_form(http)
        bad = await http.post("/admin/login", data={**form, "key": "wrong-key-000"})
        assert bad.status_code == 401 and "not valid" in bad.text
        # a key in a link is refused (it would stay in browser history), even a valid one
        for key in ("wrong-key-000", ADMIN_KEY):
            linked = await http.get(f"/admin/login?key={key}")
            assert linked.status_code == 400 and "not accepted in links" in linked.text
            assert "set-cookie" not in linked.headers


async def test_login_cookie_is_http_only_and_strict(w: World) -> None:
    async with client(w.app) as http:
        form = await signin_form(http)
        response = await http.post(
            "/admin/login", data={**form, "key": ADMIN_KEY, "next": "/admin/schedules"}
        )
        assert response.status_code == 303
        assert response.headers["location"] == "/admin/schedules"
        cookie = response.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/admin" in cookie
        assert "max-age=" in cookie and ADMIN_KEY not in cookie  # a session, not the key
        # no open redirect
        form = await signin_form(http)  # a sign-in ends the pre-session: a new form
        away = await http.post(
            "/admin/login", data={**form, "key": ADMIN_KEY, "next": "//evil.example/"}
        )
        assert away.headers["location"] == "/admin"
        # the cookie does not authenticate the API
        assert (await http.get("/api/v1/jobs")).status_code == 401


async def test_admin_retries_and_cancels_from_the_page(w: World) -> None:
    dead = await w.dead(payload={"n": 7})
    pending = await w.enqueue()
    async with client(w.app) as http:
        csrf = await login(http, ADMIN_KEY)
        listing = (await http.get("/admin")).text
        assert dead in listing and pending in listing
        assert f'action="/admin/jobs/{dead}/retry"' in listing
        assert f'action="/admin/jobs/{pending}/cancel"' in listing
        done = await http.post(
            f"/admin/jobs/{dead}/retry", data={"csrf": csrf, "next": "/admin?status=DEAD"}
        )
        assert done.status_code == 303 and done.headers["location"] == "/admin?status=DEAD"
        flash_page = await http.get("/admin?status=DEAD")
        assert "retried" in flash_page.text
        assert "retried" not in (await http.get("/admin")).text  # one-shot
        again = await http.post(f"/admin/jobs/{dead}/retry", data={"csrf": csrf})
        assert again.status_code == 303
        assert "cannot retry" in (await http.get("/admin")).text
        await http.post(f"/admin/jobs/{pending}/cancel", data={"csrf": csrf})
        detail = await http.get(f"/admin/jobs/{pending}")
        assert detail.status_code == 200 and "CANCELLED" in detail.text
        assert "JobCancelled" in detail.text
    assert (await w.job(dead)).status == jobs.JobStatus.PENDING
    assert await w.store.admin.get_job(pending) is None
    stream = await w.store.log.read_stream(jobs.job_stream(dead))
    assert stream[-1].type == EventType.JOB_RETRIED
    assert stream[-1].actor is not None and stream[-1].actor.to_json() == {
        "id": "alice",
        "via": "http",
        "role": "admin",
    }


async def test_forms_need_the_csrf_token(w: World) -> None:
    dead = await w.dead()
    async with client(w.app) as http:
        await login(http, ADMIN_KEY)
        for token in ("", "0" * 64):
            response = await http.post(f"/admin/jobs/{dead}/skip", data={"csrf": token})
            assert response.status_code == 403
    assert (await w.job(dead)).status == jobs.JobStatus.DEAD


async def test_viewer_sees_no_buttons_and_cannot_post(w: World) -> None:
    dead = await w.dead()
    async with client(w.app) as http:
        csrf = await login(http, VIEWER_KEY)
        listing = (await http.get("/admin")).text
        assert dead in listing and "data-action" not in listing
        assert "data-action" not in (await http.get("/admin/schedules")).text
        for path in (
            f"/admin/jobs/{dead}/retry",
            f"/admin/jobs/{dead}/skip",
            "/admin/schedules/cleanup/disable",
        ):
            response = await http.post(path, data={"csrf": csrf})
            assert response.status_code == 403 and "may look but not change" in response.text
    assert (await w.job(dead)).status == jobs.JobStatus.DEAD


async def test_schedule_commands_from_the_page(w: World) -> None:
    async with client(w.app) as http:
        csrf = await login(http, ADMIN_KEY)
        page = (await http.get("/admin/schedules")).text
        assert "nightly_report" in page and "cleanup" in page
        await http.post("/admin/schedules/cleanup/disable", data={"csrf": csrf})
        await http.post(
            "/admin/schedules/nightly_report/override",
            data={"csrf": csrf, "cron_override": "5 5 * * *"},
        )
        await http.post(
            "/admin/schedules/nightly_report/override", data={"csrf": csrf, "cron_override": "nope"}
        )
        assert "invalid cron" in (await http.get("/admin/schedules")).text
        await http.post("/admin/schedules/missing/enable", data={"csrf": csrf})
        assert "not found" in (await http.get("/admin/schedules")).text
    cleanup = await w.store.admin.get_schedule("cleanup")
    nightly = await w.store.admin.get_schedule("nightly_report")
    assert cleanup is not None and not cleanup.enabled
    assert nightly is not None and nightly.cron_override == "5 5 * * *"


async def test_filters_and_keyset_paging_links(w: World) -> None:
    ids = []
    for n in range(55):
        ids.append(await w.enqueue(key=f"k{n}"))
        w.clock.advance(milliseconds=1)
    async with client(w.app) as http:
        await login(http, ADMIN_KEY)
        first = (await http.get("/admin?status=PENDING&target=")).text
        assert "50 shown of 55" in first and 'rel="next"' in first and 'rel="prev"' not in first
        assert f"/admin?status=PENDING&amp;before={ids[5]}" in first
        second = (await http.get(f"/admin?status=PENDING&before={ids[5]}")).text
        assert "5 shown of 55" in second and second.count("<tr data-id=") == 5
        assert "k0<" in second and 'rel="next"' not in second
        assert f"/admin?status=PENDING&amp;after={ids[4]}" in second
        back = (await http.get(f"/admin?status=PENDING&after={ids[4]}")).text
        assert back.count("<tr data-id=") == 50 and "k54<" in back and 'rel="prev"' not in back
        assert "No open jobs match" in (await http.get("/admin?key=zzz")).text
        assert (await http.get("/admin?page=abc&status=BOGUS&before=zz")).status_code == 200


async def test_counts_are_capped(w: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(open_jobs, "COUNT_CAP", 3)
    for n in range(5):
        await w.enqueue(key=f"k{n}")
    await w.dead("kafka:orders")
    async with client(w.app) as http:
        await login(http, ADMIN_KEY)
        page = (await http.get("/admin")).text
        assert "3+ open" in page and "PENDING <b>3+</b>" in page and "DEAD <b>1</b>" in page


async def test_bulk_buttons_confirm_the_count_and_act_on_the_filter(w: World) -> None:
    dead = [await w.dead(key=f"k{n}") for n in range(3)]
    other = await w.dead("kafka:orders", key="x")
    async with client(w.app) as http:
        csrf = await login(http, ADMIN_KEY)
        page = (await http.get("/admin?target=mail:welcome")).text
        assert "<b>3</b> DEAD jobs match (target mail:welcome)" in page
        assert 'data-confirm="Retry 3 DEAD jobs (target mail:welcome)?' in page
        assert 'name="expect" value="3"' in page
        form = {"csrf": csrf, "next": "/admin", "target": "mail:welcome"}
        stale = await http.post("/admin/bulk/retry", data={**form, "expect": "2"})
        assert stale.status_code == 303
        assert "3 DEAD jobs match now, not the 2 confirmed" in (await http.get("/admin")).text
        assert (await w.job(dead[0])).status.value == "DEAD"
        done = await http.post("/admin/bulk/retry", data={**form, "expect": "3"})
        assert done.status_code == 303
        assert "3 of 3 DEAD jobs retried" in (await http.get("/admin")).text
        assert [(await w.job(j)).status.value for j in dead] == ["PENDING"] * 3
        assert (await w.job(other)).status.value == "DEAD"
        nul = await http.post("/admin/bulk/skip", data={**form, "key": "a\x00"})
        assert nul.status_code == 303 and (await w.job(other)).status.value == "DEAD"
        assert 'id="bulk"' not in (await http.get("/admin?status=PENDING")).text
        await http.post("/admin/logout", data={"csrf": csrf})
        await login(http, VIEWER_KEY)
        assert 'id="bulk"' not in (await http.get("/admin")).text
        forged = await http.post("/admin/bulk/skip", data={"csrf": csrf})
        assert forged.status_code == 403 and (await w.job(other)).status.value == "DEAD"


async def test_finished_jobs_and_find(w: World) -> None:
    done = await w.enqueue(key="a", dedupe_key="order-7:mail")
    change = job_outcomes.decide_outcome(
        await w.job(done),
        job_outcomes.RunResult(job_outcomes.Result.OK),
        job_outcomes.OutcomePolicy(jobs.DeliveryMode.AT_MOST_ONCE, 6, (1, 2)),
        w.stamp(),
    ).change
    assert await w.store.writes.apply([change]) == [True]
    still_open = await w.enqueue(key="b", dedupe_key="order-8:mail")
    async with client(w.app) as http:
        await login(http, ADMIN_KEY)
        listing_page = (await http.get("/admin")).text
        assert '<option value="SUCCEEDED" >SUCCEEDED</option>' in listing_page
        assert '<option value="EXPIRED" >EXPIRED</option>' in listing_page
        page = (await http.get("/admin?status=SUCCEEDED")).text
        assert f'<tr data-id="{done}" data-status="SUCCEEDED">' in page
        assert still_open not in page
        assert '<option value="SUCCEEDED" selected>' in page
        assert f'data-id="{done}"' in (await http.get("/admin?status=FINISHED&key=a")).text
        assert "No finished jobs" in (await http.get("/admin?status=CANCELLED")).text
        assert (await http.get("/admin?status=FINISHED&before=abc")).status_code == 200
        for query, job_id in ((done, done), ("order-7:mail", done), ("order-8:mail", still_open)):
            found = await http.get("/admin/find", params={"q": query})
            assert found.status_code == 303 and found.headers["location"] == f"/admin/jobs/{job_id}"
        assert (await http.get("/admin/find", params={"q": "nobody"})).status_code == 404
        assert (await http.get("/admin/find", params={"q": "a\x00"})).status_code == 404
