"""Crafted input gets a clean 4xx, never a 500; the page's headers, sessions, sign-in
links and failure limits."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import pytest

from jobledger.config.api_keys import parse_api_keys
from jobledger.core.clock import FakeClock
from jobledger.http.app import create_app, signin_path
from jobledger.http.auth import PAGE_COOKIE, ApiKeys
from jobledger.http.routes.page_base import FLASH_COOKIE
from jobledger.http.session import make_session, read_session
from jobledger.storage.memory import MemoryStore
from tests.unit.http_helpers import (
    ADMIN,
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


def assert_error(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["statusCode"] == status and body["code"] == code, body


# --- crafted input -------------------------------------------------------------


async def test_nul_in_filters_and_codes_is_a_clean_4xx(w: World) -> None:
    async with client(w.app) as http:
        for query in ("key=%00", "target=a%00b", "code=%00", "status=DEAD&key=x%00"):
            assert_error(
                await http.get(f"/api/v1/jobs?{query}", headers=ADMIN), 400, "validation_failed"
            )
        for method, path in (
            ("POST", "/api/v1/schedules/%00/enable"),
            ("POST", "/api/v1/schedules/a%00/disable"),
            ("DELETE", "/api/v1/schedules/a%00/cron_override"),
        ):
            assert_error(await http.request(method, path, headers=ADMIN), 404, "not_found")
        put = await http.put(
            "/api/v1/schedules/a%00/cron_override",
            json={"cron_override": "* * * * *"},
            headers=ADMIN,
        )
        assert_error(put, 404, "not_found")
        bad_cron = await http.put(
            "/api/v1/schedules/cleanup/cron_override",
            json={"cron_override": "*\x00 * * * *"},
            headers=ADMIN,
        )
        assert bad_cron.status_code == 400
        assert_error(await http.get("/api/v1/jobs/%00", headers=ADMIN), 404, "not_found")


async def test_deeply_nested_json_is_refused(w: World) -> None:
    async with client(w.app) as http:
        body = "[" * 50_000 + "]" * 50_000
        response = await http.put(
            "/api/v1/schedules/cleanup/cron_override",
            content=body[:60_000],
            headers={**ADMIN, "content-type": "application/json"},
        )
        assert_error(response, 400, "validation_failed")
        deep = '{"cron_override": ' + "[" * 20_000 + "]" * 20_000 + "}"
        response = await http.put(
            "/api/v1/schedules/cleanup/cron_override",
            content=deep,
            headers={**ADMIN, "content-type": "application/json"},
        )
        assert_error(response, 400, "validation_failed")


async def test_non_ascii_digits_are_not_numbers(w: World) -> None:
    async with client(w.app) as http:
        await sign_in(http)
        for page in ("\u00b2", "\u0661\u0660", "\U0001d7da", "1\u00b2"):
            response = await http.get(f"/admin?page={quote(page)}")
            assert response.status_code == 200, page
        for value in ("\u0661\u0660", "\u00b2", "\U0001d7da"):
            response = await http.get(f"/api/v1/jobs?limit={quote(value)}", headers=ADMIN)
            assert_error(response, 400, "validation_failed")
        assert_error(
            await http.get("/api/v1/stats?hours=%D9%A1", headers=ADMIN), 400, "validation_failed"
        )


async def test_malformed_or_forged_flash_cookies_are_ignored(w: World) -> None:
    async with client(w.app) as http:
        await sign_in(http)
        for value in (
            "%7B",
            "%ZZ",
            "{}",
            quote('{"kind":"ok","text":"You won a prize"}'),
            "a.b",
            "\x7f",
        ):
            http.cookies.set(FLASH_COOKIE, value, path="/admin")
            for path in ("/admin", "/admin/schedules", f"/admin/jobs/{'0' * 32}"):
                response = await http.get(path)
                assert response.status_code in (200, 404), (value, path, response.status_code)
                assert "You won a prize" not in response.text


# --- headers, body size, echoes --------------------------------------------------


async def test_security_headers_on_pages_and_api(w: World) -> None:
    async with client(w.app) as http:
        await sign_in(http)
        for path, headers in (("/admin", {}), ("/admin/login", {}), ("/api/v1/jobs", ADMIN)):
            response = await http.get(path, headers=headers)
            assert response.status_code == 200
            csp = response.headers["content-security-policy"]
            assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp
            assert "unsafe-inline" not in csp
            assert response.headers["x-frame-options"] == "DENY"
            assert response.headers["x-content-type-options"] == "nosniff"
            assert response.headers["cache-control"] == "no-store"
        static = await http.get("/admin/static/admin.css")
        assert static.status_code == 200 and static.headers.get("cache-control") != "no-store"


async def test_pages_carry_no_inline_script(w: World) -> None:
    dead = await w.dead()
    await w.enqueue()
    async with client(w.app) as http:
        await sign_in(http)
        for path in ("/admin", f"/admin/jobs/{dead}", "/admin/schedules", "/admin/login"):
            text = (await http.get(path)).text
            assert not re.search(r"\son[a-z]+=", text), path  # no inline handlers
            scripts = re.findall(r"<script[^>]*>", text)
            assert all("src=" in tag for tag in scripts), scripts
        listing = (await http.get("/admin")).text
        assert f'data-confirm="Skip job {dead}? It leaves the queue for good."' in listing


async def test_bodies_over_the_limit_get_413(w: World) -> None:
    async with client(w.app) as http:
        big = b'{"cron_override": "' + b"x" * 70_000 + b'"}'
        response = await http.put(
            "/api/v1/schedules/cleanup/cron_override",
            content=big,
            headers={**ADMIN, "content-type": "application/json"},
        )
        assert_error(response, 413, "payload_too_large")

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(20):
                yield b"x" * 8192

        streamed = await http.put(
            "/api/v1/schedules/cleanup/cron_override",
            content=chunks(),
            headers={**ADMIN, "content-type": "application/json"},
        )
        assert_error(streamed, 413, "payload_too_large")
        login = await http.post(
            "/admin/login",
            content=b"key=" + b"k" * 100_000,
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert login.status_code == 413


async def test_errors_do_not_echo_large_input(w: World) -> None:
    async with client(w.app) as http:
        name = "p" * 20_000
        response = await http.get(f"/api/v1/jobs?{name}=1", headers=ADMIN)
        assert_error(response, 400, "validation_failed")
        assert len(response.text) < 1000
        cron = "1 " * 30_000
        response = await http.put(
            "/api/v1/schedules/cleanup/cron_override", json={"cron_override": cron}, headers=ADMIN
        )
        assert response.status_code == 400 and len(response.text) < 1000


# --- sessions, links, limits ------------------------------------------------------


async def test_session_cookie_is_signed_and_expires(w: World) -> None:
    secret = w.app.state.csrf_secret
    async with client(w.app) as http:
        await sign_in(http)
        value = http.cookies.get(PAGE_COOKIE)
        assert value and ADMIN_KEY not in value and read_session(secret, value) is not None
        assert (await http.get("/admin")).status_code == 200
        kid, expiry, signature = value.split(".")
        for forged in (
            f"{kid}.{int(expiry) + 10**6}.{signature}",  # extended expiry, old signature
            f"{'0' * 32}.{expiry}.{signature}",
            ADMIN_KEY,  # the raw key no longer works as a cookie
            "%00",
        ):
            http.cookies.set(PAGE_COOKIE, forged, path="/admin")
            assert (await http.get("/admin")).status_code == 303, forged
        expired = make_session(secret, kid, now=0)
        http.cookies.set(PAGE_COOKIE, expired, path="/admin")
        assert (await http.get("/admin")).status_code == 303


async def test_session_ends_when_its_key_is_removed(w: World) -> None:
    async with client(w.app) as http:
        await sign_in(http, VIEWER_KEY)
        session = http.cookies.get(PAGE_COOKIE) or ""
    only_admin = ApiKeys(parse_api_keys(f"{ADMIN_KEY}:admin:alice"))
    services = w.app.state.services
    rotated = create_app(services, only_admin, csrf_secret=w.app.state.csrf_secret)
    async with client(rotated) as http:
        http.cookies.set(PAGE_COOKIE, session, path="/admin")
        assert (await http.get("/admin")).status_code == 303
    async with client(w.app) as http:  # the same cookie still works where the key does
        http.cookies.set(PAGE_COOKIE, session, path="/admin")
        assert (await http.get("/admin")).status_code == 200


async def test_one_time_signin_link(w: World) -> None:
    path = signin_path(w.app, ADMIN_KEY)
    assert path is not None and ADMIN_KEY not in path
    assert signin_path(w.app, "not-a-key-at-all") is None
    async with client(w.app) as http:
        first = await http.get(f"{path}&next=/admin/schedules")
        assert first.status_code == 303 and first.headers["location"] == "/admin/schedules"
        assert (await http.get("/admin")).status_code == 200
    async with client(w.app) as http:
        again = await http.get(path)
        assert again.status_code == 401 and "used up or expired" in again.text
        assert PAGE_COOKIE not in again.headers.get("set-cookie", "")


async def test_failed_signins_are_logged_and_limited(
    w: World, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "jobledger.http")
    async with client(w.app) as http:
        statuses = []
        form = await signin_form(http)
        for n in range(35):
            response = await http.post("/admin/login", data={**form, "key": f"wrong-key-{n:04}"})
            statuses.append(response.status_code)
        assert statuses[:30] == [401] * 30 and statuses[30:] == [429] * 5
        assert int(response.headers["retry-after"]) >= 1
        # the limit holds for the right key too, and for the API from the same client
        right = await http.post("/admin/login", data={**form, "key": ADMIN_KEY})
        assert right.status_code == 429
        assert_error(await http.get("/api/v1/jobs", headers=ADMIN), 429, "too_many_requests")
    assert "sign-in failed from" in caplog.text
    assert "wrong-key" not in caplog.text and ADMIN_KEY not in caplog.text


async def test_api_401s_are_logged_and_count(w: World, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "jobledger.http")
    async with client(w.app) as http:
        for _ in range(30):
            response = await http.get(
                "/api/v1/jobs", headers={"Authorization": "Bearer guess-0001"}
            )
            assert_error(response, 401, "unauthorized")
        assert_error(await http.get("/api/v1/jobs", headers=ADMIN), 429, "too_many_requests")
    assert "API authentication failed from" in caplog.text and "guess-0001" not in caplog.text
