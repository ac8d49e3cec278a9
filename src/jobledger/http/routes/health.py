"""`/healthz` (the process answers) and `/readyz` (the store answers), unauthenticated."""

from __future__ import annotations

import asyncio
import logging

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from jobledger.http.errors import error_response
from jobledger.http.routes._guard import services

logger = logging.getLogger("jobledger.http")
READY_TIMEOUT_S = 2.0
PROBE_ID = "0" * 32


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    store = services(request).store
    try:
        await asyncio.wait_for(store.admin.get_job(PROBE_ID), READY_TIMEOUT_S)
    except Exception as exc:
        logger.warning("readiness probe failed: %s: %s", type(exc).__name__, exc)
        return error_response(503, "not_ready", [f"store {store.name} is not reachable"])
    return JSONResponse({"status": "ready", "store": store.name})


def routes() -> list[BaseRoute]:
    return [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
    ]
