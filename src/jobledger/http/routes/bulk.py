"""`POST /api/v1/bulk/retry` and `POST /api/v1/bulk/skip`: every DEAD job matching the
filters (`target`, `code`, `key`), each through its own compare-and-set and event
under the admin's actor (`JobAdmin.bulk`). `expect` makes the call refuse (409) when
the number of matching DEAD jobs is not the one the caller confirmed."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.routing import BaseRoute, Route

from jobledger.admin.jobs import BULK_LIMIT, JobAdmin
from jobledger.config.api_keys import Principal
from jobledger.domain.errors import InvalidStatus
from jobledger.http.routes._guard import api, int_param, services
from jobledger.storage.port import JobFilter

QUERY = ("target", "code", "key", "expect", "limit")


def dead_filter(request: Request) -> JobFilter:
    query = request.query_params
    return JobFilter(target=query.get("target"), code=query.get("code"), key=query.get("key"))


async def check_expected(admin: JobAdmin, flt: JobFilter, expect: int | None) -> None:
    """409 unless exactly `expect` DEAD jobs match (counted up to expect + 1)."""
    if expect is None:
        return
    found = await admin.dead_count(flt, at_most=expect + 1)
    if found != expect:
        more = "more than " if found > expect else ""
        raise InvalidStatus(
            f"{more}{found} DEAD jobs match now, not the {expect} confirmed: look again"
        )


async def run_bulk(request: Request, action: str) -> dict[str, Any]:
    flt = dead_filter(request)
    expect = (
        int_param(request, "expect", 0, minimum=0, maximum=BULK_LIMIT)
        if "expect" in request.query_params
        else None
    )
    limit = int_param(request, "limit", BULK_LIMIT, minimum=1, maximum=BULK_LIMIT)
    admin = services(request).jobs
    await check_expected(admin, flt, expect)
    result = await admin.bulk(action, flt, limit=limit)
    return {
        "action": result.action,
        "matched": result.matched,
        "changed": result.changed,
        "conflicts": result.conflicts,
        "more": result.more,
    }


@api(write=True, query=QUERY)
async def bulk_retry(request: Request, principal: Principal) -> dict[str, Any]:
    return await run_bulk(request, "retry")


@api(write=True, query=QUERY)
async def bulk_skip(request: Request, principal: Principal) -> dict[str, Any]:
    return await run_bulk(request, "skip")


def routes() -> list[BaseRoute]:
    return [
        Route("/bulk/retry", bulk_retry, methods=["POST"]),
        Route("/bulk/skip", bulk_skip, methods=["POST"]),
    ]
