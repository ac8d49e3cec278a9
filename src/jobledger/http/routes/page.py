"""The admin page: server-rendered HTML with plain forms and one small static script,
no front-end build.

GET pages read the same services as the API; the commands live in `page_actions`,
signing in in `signin`, and what every page shares in `page_base`.
"""

from __future__ import annotations

import math
import re
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from jobledger.domain.errors import JobledgerError
from jobledger.domain.jobs import JobStatus
from jobledger.http.routes import page_actions as act
from jobledger.http.routes._guard import services
from jobledger.http.routes.page_base import HERE, error_page, login_redirect, principal_of, render
from jobledger.http.routes.signin import login, logout
from jobledger.http.serialize import event_json, job_json, schedule_json
from jobledger.storage.port import JobFilter

PAGE_SIZE = 50
STATUSES = [s.value for s in JobStatus]
_PAGE_NUMBER = re.compile(r"[0-9]{1,6}", re.ASCII)


# --- reads ---------------------------------------------------------------------------


async def jobs_page(request: Request) -> Response:
    principal = await principal_of(request)
    if principal is None:
        return login_redirect(request)
    query = request.query_params
    status = query.get("status") or None
    flt = JobFilter(
        status=JobStatus(status) if status in STATUSES else None,
        target=query.get("target") or None,
        code=query.get("code") or None,
        key=query.get("key") or None,
    )
    if any("\x00" in value for _, value in query.multi_items()):
        return error_page(request, principal, 400, "Bad filter", "Filters must not contain U+0000.")
    page_text = query.get("page", "1")
    page = max(int(page_text), 1) if _PAGE_NUMBER.fullmatch(page_text) else 1
    svc = services(request)
    result = await svc.jobs.list(flt, page=page, limit=PAGE_SIZE)
    counts = {
        s: (await svc.store.list_jobs(JobFilter(status=JobStatus(s)), offset=0, limit=1))[1]
        for s in STATUSES
    }
    filters = {
        k: v
        for k, v in (
            ("status", flt.status),
            ("target", flt.target),
            ("code", flt.code),
            ("key", flt.key),
        )
        if v
    }
    pages = max(math.ceil(result.total / PAGE_SIZE), 1)

    def page_link(number: int) -> str:
        return "/admin?" + urlencode({**filters, "page": number})

    return render(
        request,
        "jobs.html",
        principal,
        {
            "title": "Jobs",
            "nav": "jobs",
            "rows": [job_json(j) for j in result.rows],
            "total": result.total,
            "page": page,
            "pages": pages,
            "prev_link": page_link(page - 1) if page > 1 else None,
            "next_link": page_link(page + 1) if page < pages else None,
            "filters": filters,
            "statuses": STATUSES,
            "counts": counts,
        },
    )


async def job_page(request: Request) -> Response:
    principal = await principal_of(request)
    if principal is None:
        return login_redirect(request)
    try:
        detail = await services(request).jobs.detail(request.path_params["id"])
    except JobledgerError as exc:
        return render(
            request,
            "error.html",
            principal,
            {"title": "Not found", "nav": "jobs", "message": exc.message},
            404,
        )
    return render(
        request,
        "job.html",
        principal,
        {
            "title": f"Job {detail.job.id}",
            "nav": "jobs",
            "job": job_json(detail.job, payload=True, status=detail.status),
            "open": detail.open,
            "history": [event_json(e) for e in detail.history],
        },
    )


async def schedules_page(request: Request) -> Response:
    principal = await principal_of(request)
    if principal is None:
        return login_redirect(request)
    rows = await services(request).store.list_schedules()
    return render(
        request,
        "schedules.html",
        principal,
        {
            "title": "Schedules",
            "nav": "schedules",
            "rows": [schedule_json(s) for s in rows],
            "has_scheduler": services(request).schedules is not None,
        },
    )


def routes() -> list[BaseRoute]:
    return [
        Route("/admin", jobs_page, methods=["GET"]),
        Route("/admin/login", login, methods=["GET", "POST"]),
        Route("/admin/logout", logout, methods=["POST"]),
        Route("/admin/jobs/{id}", job_page, methods=["GET"]),
        Route("/admin/jobs/{id}/retry", act.command(act.retry), methods=["POST"]),
        Route("/admin/jobs/{id}/skip", act.command(act.skip), methods=["POST"]),
        Route("/admin/jobs/{id}/cancel", act.command(act.cancel), methods=["POST"]),
        Route("/admin/schedules", schedules_page, methods=["GET"]),
        Route("/admin/schedules/{code}/enable", act.command(act.enable), methods=["POST"]),
        Route("/admin/schedules/{code}/disable", act.command(act.disable), methods=["POST"]),
        Route("/admin/schedules/{code}/override", act.command(act.override), methods=["POST"]),
        Route("/admin/schedules/{code}/clear", act.command(act.clear), methods=["POST"]),
        Mount("/admin/static", app=StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
