"""`/api/v1/schedules`: list, enable, disable, cron override."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from jobledger.config.api_keys import Principal
from jobledger.domain.errors import NotFound
from jobledger.http.errors import ValidationFailed
from jobledger.http.routes._guard import api, json_object, services
from jobledger.http.serialize import schedule_json
from jobledger.http.services import ScheduleAdmin


def _admin(request: Request) -> ScheduleAdmin:
    scheduler = services(request).schedules
    if scheduler is None:
        raise NotFound(f"schedule {request.path_params['code']} not found: no scheduler runs here")
    return scheduler


@api()
async def list_schedules(request: Request, principal: Principal) -> list[dict[str, Any]]:
    return [schedule_json(s) for s in await services(request).store.admin.list_schedules()]


@api(write=True)
async def enable(request: Request, principal: Principal) -> dict[str, Any]:
    row = await _admin(request).enable(request.path_params["code"], principal.actor())
    return schedule_json(row)


@api(write=True)
async def disable(request: Request, principal: Principal) -> dict[str, Any]:
    row = await _admin(request).disable(request.path_params["code"], principal.actor())
    return schedule_json(row)


@api(write=True)
async def set_override(request: Request, principal: Principal) -> dict[str, Any]:
    body = await json_object(request)
    cron = body.get("cron_override")
    if not isinstance(cron, str):
        raise ValidationFailed("cron_override must be a string")
    row = await _admin(request).set_cron_override(
        request.path_params["code"], cron, principal.actor()
    )
    return schedule_json(row)


@api(write=True)
async def clear_override(request: Request, principal: Principal) -> dict[str, Any]:
    row = await _admin(request).clear_cron_override(request.path_params["code"], principal.actor())
    return schedule_json(row)


async def cron_override(request: Request) -> Response:
    """One route for PUT and DELETE, so a 405 lists both in `Allow`."""
    endpoint = set_override if request.method == "PUT" else clear_override
    return await endpoint(request)


def routes() -> list[BaseRoute]:
    return [
        Route("/schedules", list_schedules, methods=["GET"]),
        Route("/schedules/{code}/enable", enable, methods=["POST"]),
        Route("/schedules/{code}/disable", disable, methods=["POST"]),
        Route("/schedules/{code}/cron_override", cron_override, methods=["PUT", "DELETE"]),
    ]
