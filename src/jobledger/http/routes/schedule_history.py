"""A schedule's run history: `GET /api/v1/schedules/{code}/history` and the page
`/admin/schedules/{code}`, both from `jobledger.http.queries.schedule_runs` (bounded pages
of the schedule's stream)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from jobledger.config.api_keys import Principal
from jobledger.domain.errors import JobledgerError
from jobledger.domain.timeutil import iso
from jobledger.http.errors import ApiError
from jobledger.http.queries.schedule_runs import history
from jobledger.http.routes._guard import api, check_text, int_param, services
from jobledger.http.routes.page_base import error_page, login_redirect, principal_of, render
from jobledger.http.serialize import schedule_json

MAX_LIMIT = 200
DEFAULT_LIMIT = 50


async def _page(request: Request) -> dict[str, Any]:
    svc = services(request)
    before = int_param(request, "before", 0, minimum=1, maximum=2**62) or None
    limit = int_param(request, "limit", DEFAULT_LIMIT, minimum=1, maximum=MAX_LIMIT)
    return await history(
        svc.store,
        svc.jobs,
        request.path_params["code"],
        iso(svc.clock.now()),
        before=before,
        limit=limit,
    )


@api(query=("before", "limit"))
async def get_history(request: Request, principal: Principal) -> dict[str, Any]:
    return await _page(request)


async def schedule_page(request: Request) -> Response:
    principal = await principal_of(request)
    if principal is None:
        return login_redirect(request)
    try:
        check_text(request)
        page = await _page(request)
    except JobledgerError as exc:
        return error_page(request, principal, exc.status, "Not found", exc.message)
    except ApiError as exc:
        return error_page(request, principal, exc.status, "Bad request", "; ".join(exc.messages))
    row = await services(request).store.admin.get_schedule(page["code"])
    return render(
        request,
        "schedule.html",
        principal,
        {
            "title": f"Schedule {page['code']}",
            "nav": "schedules",
            "s": schedule_json(row) if row is not None else {},
            "h": page,
            "older": f"/admin/schedules/{quote(page['code'], safe='')}?before={page['next']}"
            if page["next"]
            else None,
            "has_scheduler": services(request).schedules is not None,
        },
    )


def api_routes() -> list[BaseRoute]:
    """Mounted under /api/v1."""
    return [Route("/schedules/{code}/history", get_history, methods=["GET"])]


def page_routes() -> list[BaseRoute]:
    return [Route("/admin/schedules/{code}", schedule_page, methods=["GET"])]
