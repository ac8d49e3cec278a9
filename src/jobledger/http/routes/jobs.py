"""`/api/v1/jobs`: list, detail with history, retry, skip, cancel."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.routing import BaseRoute, Route

from jobledger.config.api_keys import Principal
from jobledger.core.ids import is_job_id
from jobledger.domain.jobs import JobStatus
from jobledger.http.errors import ValidationFailed
from jobledger.http.queries.open_jobs import list_open
from jobledger.http.routes._guard import api, int_param, services
from jobledger.http.serialize import attempt_json, event_json, job_json
from jobledger.storage.port import JobFilter

MAX_LIMIT = 100
MAX_PAGE = 1_000_000
STATUSES = [s.value for s in JobStatus]


def job_filter(request: Request) -> JobFilter:
    query = request.query_params
    status = query.get("status")
    if status is not None and status not in STATUSES:
        raise ValidationFailed(
            f"status must be one of the following values: {', '.join(STATUSES)}"
            " (jobs that left the queue: GET /api/v1/finished)"
        )
    return JobFilter(
        status=JobStatus(status) if status is not None else None,
        target=query.get("target"),
        code=query.get("code"),
        key=query.get("key"),
    )


def cursor_param(request: Request, name: str) -> str | None:
    value = request.query_params.get(name)
    if value is not None and not is_job_id(value):
        raise ValidationFailed(f"{name} must be a job id (32 lowercase hex characters)")
    return value


@api(query=("status", "target", "code", "key", "page", "limit", "before", "after"))
async def list_jobs(request: Request, principal: Principal) -> dict[str, Any]:
    """The open jobs, `page` by `limit`, plus keyset cursors (`before`/`after`, answered
    with `next`/`prev`) and a total counted up to `open_jobs.COUNT_CAP` (`total_capped`)."""
    flt = job_filter(request)
    page = int_param(request, "page", 1, minimum=1, maximum=MAX_PAGE)
    limit = int_param(request, "limit", MAX_LIMIT, minimum=1, maximum=MAX_LIMIT)
    before, after = cursor_param(request, "before"), cursor_param(request, "after")
    result = await list_open(
        services(request).store,
        flt,
        limit=limit,
        before=before,
        after=after,
        offset=(page - 1) * limit,
    )
    return {
        "data": [job_json(job) for job in result.rows],
        "total": result.total,
        "page": page,
        "limit": limit,
        "total_capped": result.total_capped,
        "next": result.next,
        "prev": result.prev,
    }


@api()
async def get_job(request: Request, principal: Principal) -> dict[str, Any]:
    detail = await services(request).jobs.detail(request.path_params["id"])
    body = job_json(detail.job, payload=True, status=detail.status)
    body["open"] = detail.open
    body["history"] = [event_json(e) for e in detail.history]
    body["attempt_history"] = [attempt_json(a) for a in detail.attempts]
    return body


@api(write=True)
async def retry_job(request: Request, principal: Principal) -> dict[str, Any]:
    row = await services(request).jobs.retry(request.path_params["id"])
    return job_json(row)


@api(write=True)
async def skip_job(request: Request, principal: Principal) -> dict[str, Any]:
    job_id = request.path_params["id"]
    await services(request).jobs.skip(job_id)
    return {"_id": job_id, "skipped": True}


@api(write=True)
async def cancel_job(request: Request, principal: Principal) -> dict[str, Any]:
    job_id = request.path_params["id"]
    await services(request).jobs.cancel(job_id)
    return {"_id": job_id, "cancelled": True}


def routes() -> list[BaseRoute]:
    return [
        Route("/jobs", list_jobs, methods=["GET"]),
        Route("/jobs/{id}", get_job, methods=["GET"]),
        Route("/jobs/{id}/retry", retry_job, methods=["POST"]),
        Route("/jobs/{id}/skip", skip_job, methods=["POST"]),
        Route("/jobs/{id}/cancel", cancel_job, methods=["POST"]),
    ]
