"""The OpenAPI document: it covers every API route, and schemathesis, driving the real
app in process over a real store, finds no 5xx and no response that breaks it."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.routing import Mount, Route

from jobledger.core.clock import FakeClock
from jobledger.http import openapi
from jobledger.http.auth import PAGE_COOKIE
from jobledger.http.session import make_session
from jobledger.storage.memory import MemoryStore
from tests.unit.http_helpers import ADMIN, ADMIN_KEY, client, world


def _app() -> Starlette:
    clock = FakeClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))

    async def setup() -> Starlette:
        async with world(MemoryStore(), clock) as w:
            await w.enqueue(key="k1")
            await w.dead("kafka:orders", key="k2")
            await w.running()
            return w.app

    return asyncio.run(setup())


# built at import: schemathesis' lazy fixture loader does not run under this pytest
schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", _app())
# Every call is authenticated as admin (`headers=ADMIN` below), so schemathesis must not
# generate the bearer header itself: its negative cases would include "Authorization
# missing or malformed", which the forced admin header turns back into a valid request,
# and the API rightly accepts it (ST201 AcceptedNegativeData, seed-dependent). Negative
# query, path and body data are still generated; the 401 path is tests/unit/test_http_api.py.
schema.config.generation.update(with_security_parameters=False)


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_api_conforms_to_its_document(case: Any) -> None:
    response = case.call_and_validate(headers=ADMIN)
    assert response.status_code < 500


def test_every_api_route_is_documented() -> None:
    app = _app()
    documented = {
        (path, method.upper())
        for path, ops in openapi.document()["paths"].items()
        for method in ops
    }
    served = set()
    for route in app.routes:
        if isinstance(route, Mount) and route.path == openapi.PREFIX:
            for sub in route.routes:
                assert isinstance(sub, Route)
                if sub.path == "/openapi.json":
                    continue
                for method in sub.methods or ():
                    if method != "HEAD":
                        served.add((openapi.PREFIX + sub.path, method))
    assert served == documented


async def test_document_is_served_without_a_key() -> None:
    async with world(MemoryStore(), FakeClock()) as w, client(w.app) as http:
        response = await http.get("/api/v1/openapi.json")
    assert response.status_code == 200
    assert response.json()["openapi"].startswith("3.1")


# --- crafted input schemathesis does not reach: every documented route and every page ---

_NASTY = st.one_of(
    st.sampled_from(
        [
            "\x00",
            "a\x00b",
            "\u00b2",
            "\u0661\u0660",
            "\U0001d7da",
            "1\u00b2",
            "-0",
            "9" * 40,
            "%00",
            "\ud7ff",
            "\ufeff1",
        ]
    ),
    st.text(max_size=12).map(lambda t: t + "\x00"),
    st.text(
        alphabet=st.characters(categories=["Nd", "No", "Cc", "Zs", "Lo"]), min_size=1, max_size=8
    ),
)
_BODIES = st.one_of(
    st.integers(1, 30_000).map(lambda n: "[" * n + "]" * n),
    st.integers(1, 30_000).map(lambda n: '{"cron_override":' + '{"a":' * n + "1" + "}" * n + "}"),
    _NASTY.map(lambda t: '{"cron_override": ' + __import__("json").dumps(t) + "}"),
    st.binary(max_size=64).map(lambda b: b.decode("latin-1")),
)
_COOKIES = st.one_of(
    st.sampled_from(["%7B", "%ZZ", "{}", "a.b.c", "0" * 32 + ".1.x", "\x7f", '"', "%00"]),
    st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=80),
)
_OPERATIONS = sorted(
    (path, method.upper()) for path, ops in openapi.document()["paths"].items() for method in ops
)
_PAGES = [
    ("/admin", "GET"),
    ("/admin/jobs/{id}", "GET"),
    ("/admin/schedules", "GET"),
    ("/admin/login", "GET"),
    ("/admin/login", "POST"),
    ("/admin/jobs/{id}/retry", "POST"),
    ("/admin/bulk/retry", "POST"),
    ("/admin/find", "GET"),
    ("/admin/bulk/skip", "POST"),
    ("/admin/schedules/{code}/override", "POST"),
    ("/admin/api", "GET"),
    ("/admin/dashboard", "GET"),
    ("/admin/schedules/{code}", "GET"),
]
_APP = _app()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    operation=st.sampled_from(_OPERATIONS + _PAGES),
    segment=_NASTY,
    query=st.dictionaries(
        st.sampled_from(
            [
                "status",
                "target",
                "code",
                "key",
                "page",
                "limit",
                "hours",
                "range",
                "before",
                "after",
                "next",
                "token",
                "before",
                "expect",
                "q",
                "x",
            ]
        ),
        _NASTY,
        max_size=3,
    ),
    body=_BODIES,
    cookies=st.dictionaries(
        st.sampled_from(["jobledger_flash", "jobledger_flash", "jobledger_session"]),
        _COOKIES,
        max_size=2,
    ),
    authenticated=st.booleans(),
)
def test_crafted_input_never_gets_a_5xx(
    operation: tuple[str, str],
    segment: str,
    query: dict[str, str],
    body: str,
    cookies: dict[str, str],
    authenticated: bool,
) -> None:
    """NUL bytes, non-ASCII digits, deeply nested JSON and malformed cookies on every
    documented API route and every page: a 4xx (or a page), never a 5xx."""
    path, method = operation
    url = re.sub(r"\{[a-z]+\}", quote(segment, safe=""), path)

    async def call() -> int:
        async with client(_APP) as http:
            if authenticated:  # a real session too, so pages reach their flash and filters
                kid = _APP.state.keys.key_id(ADMIN_KEY)
                http.cookies.set(
                    PAGE_COOKIE, make_session(_APP.state.csrf_secret, kid), path="/admin"
                )
            for name, value in cookies.items():
                http.cookies.set(name, quote(value, safe=""), path="/admin")
            response = await http.request(
                method,
                url,
                params=query,
                content=body.encode("utf-8", "surrogatepass") if method != "GET" else None,
                headers={**(ADMIN if authenticated else {}), "content-type": "application/json"},
            )
            return response.status_code

    status = asyncio.run(call())
    assert status < 500, (method, url, query, body[:80], cookies)
