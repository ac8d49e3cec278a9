"""The admin page: server-rendered HTML with plain forms, no front-end build.

GET pages read the same services as the API; every POST carries a CSRF token, needs
role admin, runs the same admin command under the principal's actor, then redirects
back (303) with a one-shot flash message. Login stores an API key in an HttpOnly,
SameSite=Strict cookie; `/admin/login?key=…` does the same from a link (the demo
prints one) and strips the key from the address.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from jobledger.config.api_keys import Principal
from jobledger.core.context import request_context
from jobledger.domain.errors import JobledgerError
from jobledger.domain.jobs import JobStatus
from jobledger.http.auth import PAGE_COOKIE, csrf_ok, csrf_token
from jobledger.http.routes._guard import services, traceparent_of
from jobledger.http.serialize import event_json, job_json, schedule_json
from jobledger.storage.port import JobFilter

HERE = Path(__file__).resolve().parent.parent
templates = Jinja2Templates(directory=str(HERE / "templates"))
FLASH_COOKIE = "jobledger_flash"
PAGE_SIZE = 50
STATUSES = [s.value for s in JobStatus]


def _when(value: str | None) -> str:
    if not value:
        return "—"
    return value.replace("T", " ").replace(".000Z", "Z")


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


templates.env.filters["when"] = _when
templates.env.filters["pretty"] = _pretty


def _safe_next(value: str | None, default: str = "/admin") -> str:
    """Only redirect back inside the page (no open redirect)."""
    if value and value.startswith("/admin") and "//" not in value and "\\" not in value:
        return value
    return default


async def _principal(request: Request) -> Principal | None:
    principal: Principal | None = await request.app.state.page_auth.authenticate(request)
    return principal


def _login_redirect(request: Request) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/admin/login?{urlencode({'next': target})}", status_code=303)


def _render(
    request: Request,
    name: str,
    principal: Principal | None,
    context: dict[str, Any],
    status_code: int = 200,
) -> Response:
    flash = request.cookies.get(FLASH_COOKIE)
    ctx = {
        "principal": principal,
        "csrf": csrf_token(request.app.state.csrf_secret, principal) if principal else "",
        "flash": json.loads(unquote(flash)) if flash else None,
        "here": request.url.path + (f"?{request.url.query}" if request.url.query else ""),
        "can_login": request.app.state.login is not None,
        **context,
    }
    response = templates.TemplateResponse(request, name, ctx, status_code=status_code)
    if flash:
        response.delete_cookie(FLASH_COOKIE, path="/admin")
    return response


def _with_flash(response: Response, kind: str, text: str) -> Response:
    response.set_cookie(
        FLASH_COOKIE,
        quote(json.dumps({"kind": kind, "text": text})),
        max_age=60,
        path="/admin",
        httponly=True,
        samesite="strict",
    )
    return response


# --- reads ---------------------------------------------------------------------------


async def jobs_page(request: Request) -> Response:
    principal = await _principal(request)
    if principal is None:
        return _login_redirect(request)
    query = request.query_params
    status = query.get("status") or None
    flt = JobFilter(
        status=JobStatus(status) if status in STATUSES else None,
        target=query.get("target") or None,
        code=query.get("code") or None,
        key=query.get("key") or None,
    )
    page_text = query.get("page", "1")
    page = max(int(page_text), 1) if page_text.isdigit() and len(page_text) < 7 else 1
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

    return _render(
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
    principal = await _principal(request)
    if principal is None:
        return _login_redirect(request)
    try:
        detail = await services(request).jobs.detail(request.path_params["id"])
    except JobledgerError as exc:
        return _render(
            request,
            "error.html",
            principal,
            {"title": "Not found", "nav": "jobs", "message": exc.message},
            404,
        )
    return _render(
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
    principal = await _principal(request)
    if principal is None:
        return _login_redirect(request)
    rows = await services(request).store.list_schedules()
    return _render(
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


# --- writes ----------------------------------------------------------------------------

Command = Callable[[Request, Principal, dict[str, str]], Awaitable[str]]


def _command(command: Command) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        principal = await _principal(request)
        if principal is None:
            return _login_redirect(request)
        form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
        back = _safe_next(form.get("next"))
        if not csrf_ok(request.app.state.csrf_secret, principal, form.get("csrf", "")):
            return _render(
                request,
                "error.html",
                principal,
                {
                    "title": "Forbidden",
                    "message": "The form expired: reload the page and try again.",
                },
                403,
            )
        if not principal.is_admin:
            return _render(
                request,
                "error.html",
                principal,
                {
                    "title": "Forbidden",
                    "message": f"Role {principal.role!r} may look but not change jobs or schedules.",
                },
                403,
            )
        redirect = RedirectResponse(back, status_code=303)
        with request_context(traceparent=traceparent_of(request), actor=principal.actor()):
            try:
                done = await command(request, principal, form)
            except JobledgerError as exc:
                return _with_flash(redirect, "error", exc.message)
        return _with_flash(redirect, "ok", done)

    return endpoint


async def _retry(request: Request, principal: Principal, form: dict[str, str]) -> str:
    job_id = request.path_params["id"]
    await services(request).jobs.retry(job_id)
    return f"Job {job_id} retried: PENDING, attempts 0."


async def _skip(request: Request, principal: Principal, form: dict[str, str]) -> str:
    job_id = request.path_params["id"]
    await services(request).jobs.skip(job_id)
    return f"Job {job_id} skipped."


async def _cancel(request: Request, principal: Principal, form: dict[str, str]) -> str:
    job_id = request.path_params["id"]
    await services(request).jobs.cancel(job_id)
    return f"Job {job_id} cancelled."


def _scheduler(request: Request) -> Any:
    scheduler = services(request).schedules
    if scheduler is None:
        raise JobledgerError("no scheduler runs in this process", code="not_found")
    return scheduler


async def _enable(request: Request, principal: Principal, form: dict[str, str]) -> str:
    code = request.path_params["code"]
    await _scheduler(request).enable(code, principal.actor())
    return f"Schedule {code} enabled."


async def _disable(request: Request, principal: Principal, form: dict[str, str]) -> str:
    code = request.path_params["code"]
    await _scheduler(request).disable(code, principal.actor())
    return f"Schedule {code} disabled."


async def _override(request: Request, principal: Principal, form: dict[str, str]) -> str:
    code = request.path_params["code"]
    cron = form.get("cron_override", "").strip()
    if not cron:
        await _scheduler(request).clear_cron_override(code, principal.actor())
        return f"Schedule {code}: override cleared."
    await _scheduler(request).set_cron_override(code, cron, principal.actor())
    return f"Schedule {code}: override set to {cron}."


async def _clear(request: Request, principal: Principal, form: dict[str, str]) -> str:
    code = request.path_params["code"]
    await _scheduler(request).clear_cron_override(code, principal.actor())
    return f"Schedule {code}: override cleared."


# --- login ---------------------------------------------------------------------------


def _set_key(response: Response, request: Request, key: str) -> Response:
    response.set_cookie(
        PAGE_COOKIE,
        key,
        path="/admin",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


async def login(request: Request) -> Response:
    lookup = request.app.state.login
    nxt = _safe_next(request.query_params.get("next"))
    if request.method == "GET":
        key = request.query_params.get("key")
        if key and lookup is not None and lookup(key) is not None:
            return _set_key(RedirectResponse(nxt, status_code=303), request, key)
        return _render(
            request,
            "login.html",
            None,
            {
                "title": "Sign in",
                "next": nxt,
                "failed": bool(key),
            },
            401 if key else 200,
        )
    form = await request.form()
    key = str(form.get("key", "")).strip()
    nxt = _safe_next(str(form.get("next", "")))
    if lookup is None or lookup(key) is None:
        return _render(
            request,
            "login.html",
            None,
            {
                "title": "Sign in",
                "next": nxt,
                "failed": True,
            },
            401,
        )
    return _set_key(RedirectResponse(nxt, status_code=303), request, key)


async def logout(request: Request) -> Response:
    response = RedirectResponse("/admin/login", status_code=303)
    response.delete_cookie(PAGE_COOKIE, path="/admin")
    return response


def routes() -> list[BaseRoute]:
    return [
        Route("/admin", jobs_page, methods=["GET"]),
        Route("/admin/login", login, methods=["GET", "POST"]),
        Route("/admin/logout", logout, methods=["POST"]),
        Route("/admin/jobs/{id}", job_page, methods=["GET"]),
        Route("/admin/jobs/{id}/retry", _command(_retry), methods=["POST"]),
        Route("/admin/jobs/{id}/skip", _command(_skip), methods=["POST"]),
        Route("/admin/jobs/{id}/cancel", _command(_cancel), methods=["POST"]),
        Route("/admin/schedules", schedules_page, methods=["GET"]),
        Route("/admin/schedules/{code}/enable", _command(_enable), methods=["POST"]),
        Route("/admin/schedules/{code}/disable", _command(_disable), methods=["POST"]),
        Route("/admin/schedules/{code}/override", _command(_override), methods=["POST"]),
        Route("/admin/schedules/{code}/clear", _command(_clear), methods=["POST"]),
        Mount("/admin/static", app=StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
