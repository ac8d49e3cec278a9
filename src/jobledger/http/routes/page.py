"""The admin page: server-rendered HTML with plain forms and one small static script,
no front-end build.

GET pages read the same services as the API; the commands live in `page_actions`,
signing in in `signin`, and what every page shares in `page_base`.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from jobledger.domain.errors import JobledgerError
from jobledger.domain.timeutil import iso
from jobledger.http.routes import page_actions as act
from jobledger.http.routes import page_bulk, page_finished
from jobledger.http.routes._guard import services
from jobledger.http.routes.page_base import HERE, login_redirect, principal_of, render
from jobledger.http.routes.page_jobs import jobs_page, retry_state
from jobledger.http.routes.signin import login, logout
from jobledger.http.serialize import attempt_json, event_json, job_json, schedule_json

# --- reads ---------------------------------------------------------------------------


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
    job = job_json(detail.job, payload=True, status=detail.status)
    job["retry"] = retry_state(request, job)
    return render(
        request,
        "job.html",
        principal,
        {
            "title": f"Job {detail.job.id}",
            "nav": "jobs",
            "job": job,
            "open": detail.open,
            "history": [event_json(e) for e in detail.history],
            "attempts": [attempt_json(a) for a in reversed(detail.attempts)],
        },
    )


async def jobs_list_redirect(request: Request) -> Response:
    """`/admin/jobs` is the job list's other name: it sends the browser to `/admin`,
    with the same filters."""
    query = f"?{request.url.query}" if request.url.query else ""
    return RedirectResponse(f"/admin{query}", status_code=308)


async def schedules_page(request: Request) -> Response:
    principal = await principal_of(request)
    if principal is None:
        return login_redirect(request)
    rows = await services(request).store.admin.list_schedules()
    return render(
        request,
        "schedules.html",
        principal,
        {
            "title": "Schedules",
            "nav": "schedules",
            "rows": [schedule_json(s) for s in rows],
            "has_scheduler": services(request).schedules is not None,
            "now": iso(services(request).clock.now()),
        },
    )


def routes() -> list[BaseRoute]:
    return [
        Route("/admin", jobs_page, methods=["GET"]),
        Route("/admin/login", login, methods=["GET", "POST"]),
        Route("/admin/logout", logout, methods=["POST"]),
        Route("/admin/jobs", jobs_list_redirect, methods=["GET"]),
        Route("/admin/jobs/{id}", job_page, methods=["GET"]),
        Route("/admin/find", page_finished.find_page, methods=["GET"]),
        Route("/admin/bulk/retry", act.command(page_bulk.retry_all), methods=["POST"]),
        Route("/admin/bulk/skip", act.command(page_bulk.skip_all), methods=["POST"]),
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
