"""The admin page's jobs list (`/admin`): filters, keyset pages (Newer / Older links
carrying `after` / `before` cursors) and counts capped at `open_jobs.COUNT_CAP`, so the
page costs the same on a backlog of a hundred jobs or of a million."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from jobledger.config.api_keys import Principal
from jobledger.core.ids import is_job_id
from jobledger.domain.jobs import Job, JobStatus
from jobledger.http.queries import open_jobs
from jobledger.http.queries.finished_jobs import FINISHED_STATUSES
from jobledger.http.queries.open_jobs import capped_count, list_open, shown_count
from jobledger.http.routes._guard import services
from jobledger.http.routes.page_base import (
    filtered_page_principal,
    render,
)
from jobledger.http.routes.page_finished import finished_page, wants_finished
from jobledger.http.serialize import job_json
from jobledger.storage.port import JobFilter

PAGE_SIZE = 50
STATUSES = [s.value for s in JobStatus]


def page_filter(request: Request) -> JobFilter:
    """The filters of the page's query; an unknown status or an empty field is no filter."""
    query = request.query_params
    status = query.get("status") or None
    return JobFilter(
        status=JobStatus(status) if status in STATUSES else None,
        target=query.get("target") or None,
        code=query.get("code") or None,
        key=query.get("key") or None,
    )


def filter_params(flt: JobFilter) -> dict[str, str]:
    values = (("status", flt.status), ("target", flt.target), ("code", flt.code), ("key", flt.key))
    return {name: str(value) for name, value in values if value}


def retry_state(request: Request, row: dict[str, Any]) -> dict[str, Any] | None:
    """What a PENDING row whose last attempt failed shows instead of an error: the retry
    is scheduled at `next_at`, and will be attempt `attempt` of `of` (None when this
    process does not know the code's limit). None for any other row."""
    if row["status"] != JobStatus.PENDING.value or not row["last_error"] or row["outcome_token"]:
        return None
    limit = services(request).max_attempts
    return {
        "next_at": row["next_run_at"],
        "attempt": row["attempts"] + 1,
        "of": limit(row["code"]) if limit is not None else None,
    }


def page_row(request: Request, job: Job) -> dict[str, Any]:
    """A job row as the page shows it: its JSON form and its retry state (`retry`)."""
    row = job_json(job)
    row["retry"] = retry_state(request, row)
    return row


def _cursor(request: Request, name: str) -> str | None:
    value = request.query_params.get(name)
    return value if value is not None and is_job_id(value) else None


async def bulk_context(
    request: Request, principal: Principal, flt: JobFilter
) -> dict[str, Any] | None:
    """The bulk bar's values (an admin's list that may hold DEAD rows, some matching),
    or None: how many DEAD jobs match the filters, as the confirmation shows it."""
    if not principal.is_admin or flt.status not in (None, JobStatus.DEAD):
        return None
    cap = open_jobs.COUNT_CAP
    count = await services(request).jobs.dead_count(flt, at_most=cap + 1)
    if count == 0:
        return None
    where = ", ".join(f"{k} {v}" for k, v in filter_params(flt).items() if k != "status")
    return {
        "count": shown_count(min(count, cap), count > cap),
        "expect": count if count <= cap else "",
        "where": f" ({where})" if where else "",
        "fields": {k: v for k, v in filter_params(flt).items() if k != "status"},
    }


async def jobs_page(request: Request) -> Response:
    principal = await filtered_page_principal(request)
    if isinstance(principal, Response):
        return principal
    if wants_finished(request):
        return await finished_page(request, principal)
    flt = page_filter(request)
    before = _cursor(request, "before")
    after = None if before is not None else _cursor(request, "after")
    store = services(request).store
    result = await list_open(store, flt, limit=PAGE_SIZE, before=before, after=after)
    counts: dict[str, str] = {}
    for status in STATUSES:
        counts[status] = shown_count(
            *await capped_count(store, JobFilter(status=JobStatus(status)))
        )
    filters = filter_params(flt)

    def link(**cursor: str) -> str:
        return "/admin?" + urlencode({**filters, **cursor})

    context: dict[str, Any] = {
        "title": "Jobs",
        "nav": "jobs",
        "rows": [page_row(request, j) for j in result.rows],
        "total": shown_count(result.total, result.total_capped),
        "prev_link": link(after=result.prev) if result.prev else None,
        "next_link": link(before=result.next) if result.next else None,
        "filters": filters,
        "statuses": STATUSES,
        "finished_statuses": FINISHED_STATUSES,
        "counts": counts,
        "bulk": await bulk_context(request, principal, flt),
    }
    return render(request, "jobs.html", principal, context)
