"""Defects a probe of the admin server found: non-ASCII cookies and form tokens, Nagle's
algorithm on kept-alive connections, a failed-login limit dodged through
`X-Forwarded-For`, and sign-in / sign-out forms without a CSRF token or Origin check."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from starlette.applications import Starlette

from jobledger.app import build
from jobledger.config.settings import Settings
from jobledger.core.clock import FakeClock
from jobledger.http.auth import PAGE_COOKIE
from jobledger.http.listen import listen
from jobledger.http.routes.page_base import FLASH_COOKIE
from jobledger.pod import Pod
from jobledger.storage.memory import MemoryStore
from tests.unit.http_helpers import ADMIN_KEY, World, client, sign_in, signin_form, world


@pytest.fixture
async def w(clock: FakeClock) -> AsyncIterator[World]:
    async with world(MemoryStore(), clock) as built:
        yield built


# --- non-ASCII text in cookies and form tokens -------------------------------------------

NON_ASCII = ("é", "\u2603", "%C3%A9", "%C3%A9.%C3%A9", "ü.0123")


async def get_with_cookies(app: Starlette, path: str, cookies: dict[str, str]) -> int:
    """GET `path` with a Cookie header of these values as UTF-8 bytes (httpx's cookie
    jar takes ASCII only; a browser sends what it was given)."""
    header = "; ".join(f"{name}={value}" for name, value in cookies.items()).encode()
    async with client(app) as http:
        return (await http.get(path, headers=[(b"cookie", header)])).status_code


async def test_non_ascii_cookies_are_ignored_on_every_page(w: World) -> None:
    """A cookie the server did not set is ignored, whatever it holds: the sign-in page
    and the signed-in pages still answer (the flash cookie's signature was compared as
    text, and a non-ASCII one raised TypeError: every page answered 500)."""
    async with client(w.app) as http:
        await sign_in(http)
        session = http.cookies.get(PAGE_COOKIE) or ""
    for value in NON_ASCII:
        flash = {FLASH_COOKIE: value}
        assert await get_with_cookies(w.app, "/admin/login", flash) == 200, value
        for path in ("/admin", "/admin/schedules", "/admin/dashboard"):
            status = await get_with_cookies(w.app, path, {PAGE_COOKIE: session, **flash})
            assert status == 200, (value, path, status)
        status = await get_with_cookies(w.app, "/admin", {PAGE_COOKIE: value})
        assert status == 303, value  # not a session: signed out, sent to the sign-in form


async def test_a_non_ascii_form_token_is_refused_not_an_error(w: World) -> None:
    job_id = await w.dead()
    async with client(w.app) as http:
        await sign_in(http)
        for token in ("é", "\u2603" * 64):
            response = await http.post(
                f"/admin/jobs/{job_id}/retry", data={"csrf": token, "next": "/admin"}
            )
            assert response.status_code == 403, (token, response.status_code)
        assert (await w.job(job_id)).status.value == "DEAD"
        form = await signin_form(http)
        refused = await http.post("/admin/login", data={**form, "key": ADMIN_KEY, "csrf": "é"})
        assert refused.status_code == 403


# --- Nagle's algorithm --------------------------------------------------------------------


async def test_the_listening_socket_turns_nagle_off_for_accepted_connections() -> None:
    """asyncio (and so uvicorn) sets TCP_NODELAY only on sockets whose protocol is
    IPPROTO_TCP; an accepted socket takes the listener's. With Nagle on, every response
    after the first on a kept-alive connection waited for a delayed ACK (~40 ms:
    bench/keepalive_latency.py)."""
    sock = listen("127.0.0.1", 0)
    seen: list[int] = []

    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted_sock = writer.get_extra_info("socket")
        seen.append(accepted_sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(accepted, sock=sock)
    async with server:
        host, port = sock.getsockname()[:2]
        _, writer = await asyncio.open_connection(host, port)
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.01)
        writer.close()
    assert seen and seen[0] != 0


# --- forwarded headers --------------------------------------------------------------------


@asynccontextmanager
async def serving(pod: Pod) -> AsyncIterator[str]:
    """The pod's admin server (uvicorn, as `serve` runs it) on a free loopback port."""
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    task = asyncio.create_task(
        pod.serve_http("127.0.0.1", 0, on_ready=ready.set_result, until=stop)
    )
    try:
        yield await asyncio.wait_for(ready, 10)
    finally:
        stop.set()
        await task


async def failed_logins(base: str, tries: int, *, forwarded: bool) -> list[int]:
    statuses = []
    async with httpx.AsyncClient(base_url=base) as http:
        form = await signin_form(http)
        for n in range(tries):
            headers = {"X-Forwarded-For": f"203.0.113.{n}"} if forwarded else {}
            data = {**form, "key": f"wrong-key-{n:04}"}
            statuses.append(
                (await http.post("/admin/login", data=data, headers=headers)).status_code
            )
    return statuses


async def test_forwarded_for_does_not_dodge_the_failed_login_limit() -> None:
    """By default no proxy is trusted: a new X-Forwarded-For value per try is the same
    client (uvicorn trusted the header from 127.0.0.1, so each try was a new client)."""
    pod = build(Settings(), store=MemoryStore(), api_keys=f"{ADMIN_KEY}:admin:alice")
    async with serving(pod) as base:
        statuses = await failed_logins(base, 32, forwarded=True)
    assert statuses[:30] == [401] * 30 and statuses[30:] == [429, 429]


async def test_forwarded_for_is_read_from_a_configured_proxy() -> None:
    settings = Settings(forwarded_allow_ips=("127.0.0.1",))
    pod = build(settings, store=MemoryStore(), api_keys=f"{ADMIN_KEY}:admin:alice")
    async with serving(pod) as base:
        statuses = await failed_logins(base, 32, forwarded=True)
    assert statuses == [401] * 32  # each try names another client behind the proxy


# --- CSRF on the sign-in and sign-out forms -----------------------------------------------


async def test_signin_needs_the_form_token_bound_to_the_pre_session(w: World) -> None:
    async with client(w.app) as http:
        no_token = await http.post("/admin/login", data={"key": ADMIN_KEY, "next": "/admin"})
        assert no_token.status_code == 403 and PAGE_COOKIE not in no_token.headers.get(
            "set-cookie", ""
        )
        form = await signin_form(http)
    async with client(w.app) as other:  # another browser: the token is not its own
        stolen = await other.post("/admin/login", data={**form, "key": ADMIN_KEY})
        assert stolen.status_code == 403
        assert (await other.get("/admin")).status_code == 303
    async with client(w.app) as http:
        form = await signin_form(http)
        ok = await http.post("/admin/login", data={**form, "key": ADMIN_KEY})
        assert ok.status_code == 303 and (await http.get("/admin")).status_code == 200


async def test_posts_from_another_origin_are_refused(w: World) -> None:
    async with client(w.app) as http:
        form = await signin_form(http)
        for origin in ("https://evil.example", "null"):
            refused = await http.post(
                "/admin/login", data={**form, "key": ADMIN_KEY}, headers={"Origin": origin}
            )
            assert refused.status_code == 403, origin
        cross_referer = await http.post(
            "/admin/login",
            data={**form, "key": ADMIN_KEY},
            headers={"Referer": "https://evil.example/admin/login"},
        )
        assert cross_referer.status_code == 403
        same = await http.post(
            "/admin/login",
            data={**form, "key": ADMIN_KEY},
            headers={"Origin": "http://testserver"},
        )
        assert same.status_code == 303
        page = await http.get("/admin")
        csrf = re.search(r'name="csrf-token" content="([0-9a-f]+)"', page.text)
        assert csrf is not None
        away = await http.post(
            "/admin/logout",
            data={"csrf": csrf.group(1)},
            headers={"Origin": "https://evil.example"},
        )
        assert away.status_code == 403 and (await http.get("/admin")).status_code == 200


async def test_signout_needs_the_page_token(w: World) -> None:
    async with client(w.app) as http:
        await sign_in(http)
        forged = await http.post("/admin/logout")
        assert forged.status_code == 403
        assert (await http.get("/admin")).status_code == 200  # still signed in
        page = await http.get("/admin")
        csrf = re.search(
            r'action="/admin/logout"><input type="hidden" name="csrf" value="([0-9a-f]+)"',
            page.text,
        )
        assert csrf is not None, "the sign-out form carries the page token"
        out = await http.post("/admin/logout", data={"csrf": csrf.group(1)})
        assert out.status_code == 303 and (await http.get("/admin")).status_code == 303
