"""The OpenAPI document: it covers every API route, and schemathesis, driving the real
app in process over a real store, finds no 5xx and no response that breaks it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings
from starlette.applications import Starlette
from starlette.routing import Mount, Route

from jobledger.core.clock import FakeClock
from jobledger.http import openapi
from jobledger.storage.memory import MemoryStore
from tests.unit.http_helpers import ADMIN, client, world


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
