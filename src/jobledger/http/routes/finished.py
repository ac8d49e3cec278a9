"""`GET /api/v1/finished`: jobs that left the queue (SUCCEEDED, SKIPPED, CANCELLED,
EXPIRED), newest first, from the log (`jobledger.http.queries.finished_jobs`); search by `id` or
`dedupe_key`, filter by status, target, code, key."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.routing import BaseRoute, Route

from jobledger.config.api_keys import Principal
from jobledger.http.errors import ValidationFailed
from jobledger.http.queries.finished_jobs import (
    FINISHED_STATUSES,
    Finished,
    FinishedFilter,
    FinishedPage,
    browse,
    find,
)
from jobledger.http.routes._guard import api, int_param, services
from jobledger.http.serialize import job_json
from jobledger.storage.port import Store

MAX_LIMIT = 100
QUERY = ("status", "target", "code", "key", "id", "dedupe_key", "before", "limit")


def finished_json(row: Finished) -> dict[str, Any]:
    body = job_json(row.job, status=row.status)
    body["ended"] = {
        "type": row.closing.type,
        "position": row.closing.position,
        "at": body["closed_at"],
        "actor": row.closing.actor.to_json() if row.closing.actor else None,
        "reason": row.closing.data.get("reason"),
    }
    return body


def finished_filter(values: dict[str, str]) -> FinishedFilter:
    status = values.get("status") or None
    if status is not None and status not in FINISHED_STATUSES:
        raise ValidationFailed(
            f"status must be one of the following values: {', '.join(FINISHED_STATUSES)}"
        )
    return FinishedFilter(
        status=status,
        target=values.get("target") or None,
        code=values.get("code") or None,
        key=values.get("key") or None,
    )


def _kept(row: Finished, flt: FinishedFilter) -> bool:
    job = row.job
    return all(
        want is None or have == want
        for have, want in (
            (row.status, flt.status),
            (job.target, flt.target),
            (job.code, flt.code),
            (job.key, flt.key),
        )
    )


async def finished_page(
    store: Store,
    flt: FinishedFilter,
    *,
    job_id: str | None,
    dedupe_key: str | None,
    before: int | None,
    limit: int,
) -> FinishedPage:
    """A search by id or dedupe key (one job, filters still applied), else a browse."""
    if job_id or dedupe_key:
        found = await find(store, job_id=job_id or None, dedupe_key=dedupe_key or None)
        return FinishedPage([r for r in found if _kept(r, flt)], None, 0)
    return await browse(store, flt, before=before, limit=limit)


@api(query=QUERY)
async def list_finished(request: Request, principal: Principal) -> dict[str, Any]:
    query = request.query_params
    flt = finished_filter(dict(query))
    limit = int_param(request, "limit", 50, minimum=1, maximum=MAX_LIMIT)
    before = (
        int_param(request, "before", 0, minimum=1, maximum=2**63 - 1) if "before" in query else None
    )
    page = await finished_page(
        services(request).store,
        flt,
        job_id=query.get("id"),
        dedupe_key=query.get("dedupe_key"),
        before=before,
        limit=limit,
    )
    return {
        "data": [finished_json(row) for row in page.rows],
        "next": page.next,
        "scanned": page.scanned,
        "limit": limit,
    }


def routes() -> list[BaseRoute]:
    return [Route("/finished", list_finished, methods=["GET"])]
