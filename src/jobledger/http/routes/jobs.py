"""`/api/v1/jobs`: list (reference §4), detail with history, retry, skip, cancel."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.routing import BaseRoute, Route

from jobledger.config.api_keys import Principal
from jobledger.domain.jobs import JobStatus
from jobledger.http.errors import ValidationFailed
from jobledger.http.routes._guard import api, int_param, services
from jobledger.http.serialize import event_json, job_json
from jobledger.storage.port import JobFilter

MAX_LIMIT = 100
MAX_PAGE = 1_000_000
STATUSES = [s.value for s in JobStatus]


def job_filter(request: Request) -> JobFilter:
    query = request.query_params
    status = query.get("status")
    if status is not None and status not in STATUSES:
        raise ValidationFailed(f"status must be one of the following values: {', '.join(STATUSES)}")
    return JobFilter(
        status=JobStatus(status) if status is not None else None,
        target=query.get("target"),
        code=query.get("code"),
        key=query.get("key"),
    )


@api(query=("status", "target", "code", "key", "page", "limit"))
async def list_jobs(request: Request, principal: Principal) -> dict[str, Any]:
    flt = job_filter(request)
    page = int_param(request, "page", 1, minimum=1, maximum=MAX_PAGE)
    limit = int_param(request, "limit", MAX_LIMIT, minimum=1, maximum=MAX_LIMIT)
    result = await services(request).jobs.list(flt, page=page, limit=limit)
    return {
        "data": [job_json(job) for job in result.rows],
        "total": result.total,
        "page": result.page,
        "limit": result.limit,
    }


@api()
async def get_job(request: Request, principal: Principal) -> dict[str, Any]:
    detail = await services(request).jobs.detail(request.path_params["id"])
    body = job_json(detail.job, payload=True, status=detail.status)
    body["open"] = detail.open
    body["history"] = [event_json(e) for e in detail.history]
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
