"""Reads beyond the reference: `/stats` and the auditors' `/events` feed."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.routing import BaseRoute, Route

from jobledger.config.api_keys import Principal
from jobledger.http.routes._guard import api, int_param, services
from jobledger.http.serialize import event_json
from jobledger.projections.stats import shared_stats

MAX_EVENTS = 1000
MAX_POSITION = 2**62
MAX_HOURS = 24 * 35


@api(query=("hours",))
async def stats(request: Request, principal: Principal) -> dict[str, Any]:
    """The stats projection's hourly outcomes of the last `hours` hours, per-minute
    outcomes of the last hour, the open queue per target and code, and open jobs by
    status (`jobledger.projections.stats.read_stats`), one computation a second shared
    by the polling clients (`shared_stats`)."""
    hours = int_param(request, "hours", 24, minimum=1, maximum=MAX_HOURS)
    svc = services(request)
    return await shared_stats(svc.store, svc.clock, hours=hours)


@api(query=("after", "limit"))
async def events(request: Request, principal: Principal) -> dict[str, Any]:
    """The log after position `after`, oldest first; `next` is the cursor to pass on."""
    after = int_param(request, "after", 0, minimum=0, maximum=MAX_POSITION)
    limit = int_param(request, "limit", 100, minimum=1, maximum=MAX_EVENTS)
    page = await services(request).store.log.read_log(after, limit=limit)
    last = page[-1].position if page else None
    return {
        "data": [event_json(e) for e in page],
        "after": after,
        "next": last if last is not None else after,
        "limit": limit,
    }


def routes() -> list[BaseRoute]:
    return [
        Route("/stats", stats, methods=["GET"]),
        Route("/events", events, methods=["GET"]),
    ]
