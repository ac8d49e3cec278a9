"""The admin page's commands: every POST carries the CSRF token, needs role admin, runs
the same admin command as the API under the principal's actor, then redirects back
(303) with a one-shot flash message."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from jobledger.config.api_keys import Principal
from jobledger.core.context import request_context
from jobledger.domain.errors import JobledgerError, NotFound
from jobledger.http.auth import csrf_ok
from jobledger.http.routes._guard import services, traceparent_of
from jobledger.http.routes.page_base import (
    error_page,
    login_redirect,
    principal_of,
    safe_next,
    with_flash,
)

Command = Callable[[Request, Principal, dict[str, str]], Awaitable[str]]


def command(run: Command) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        principal = await principal_of(request)
        if principal is None:
            return login_redirect(request)
        form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
        back = safe_next(form.get("next"))
        if not csrf_ok(request.app.state.csrf_secret, principal, form.get("csrf", "")):
            return error_page(
                request,
                principal,
                403,
                "Forbidden",
                "The form expired: reload the page and try again.",
            )
        if not principal.is_admin:
            return error_page(
                request,
                principal,
                403,
                "Forbidden",
                f"Role {principal.role!r} may look but not change jobs or schedules.",
            )
        redirect = RedirectResponse(back, status_code=303)
        with request_context(traceparent=traceparent_of(request), actor=principal.actor()):
            try:
                for name, value in request.path_params.items():
                    if "\x00" in value:
                        raise NotFound(f"{name} not found: it contains U+0000")
                done = await run(request, principal, form)
            except JobledgerError as exc:
                return with_flash(request, redirect, "error", exc.message)
        return with_flash(request, redirect, "ok", done)

    return endpoint


async def retry(request: Request, principal: Principal, form: dict[str, str]) -> str:
    job_id = request.path_params["id"]
    await services(request).jobs.retry(job_id)
    return f"Job {job_id} retried: PENDING, attempts 0."


async def skip(request: Request, principal: Principal, form: dict[str, str]) -> str:
    job_id = request.path_params["id"]
    await services(request).jobs.skip(job_id)
    return f"Job {job_id} skipped."


async def cancel(request: Request, principal: Principal, form: dict[str, str]) -> str:
    job_id = request.path_params["id"]
    await services(request).jobs.cancel(job_id)
    return f"Job {job_id} cancelled."


def _scheduler(request: Request) -> Any:
    scheduler = services(request).schedules
    if scheduler is None:
        raise NotFound("no scheduler runs in this process")
    return scheduler


async def enable(request: Request, principal: Principal, form: dict[str, str]) -> str:
    code = request.path_params["code"]
    await _scheduler(request).enable(code, principal.actor())
    return f"Schedule {code} enabled."


async def disable(request: Request, principal: Principal, form: dict[str, str]) -> str:
    code = request.path_params["code"]
    await _scheduler(request).disable(code, principal.actor())
    return f"Schedule {code} disabled."


async def override(request: Request, principal: Principal, form: dict[str, str]) -> str:
    code = request.path_params["code"]
    cron = form.get("cron_override", "").strip()
    if not cron:
        await _scheduler(request).clear_cron_override(code, principal.actor())
        return f"Schedule {code}: override cleared."
    await _scheduler(request).set_cron_override(code, cron, principal.actor())
    return f"Schedule {code}: override set to {cron}."


async def clear(request: Request, principal: Principal, form: dict[str, str]) -> str:
    code = request.path_params["code"]
    await _scheduler(request).clear_cron_override(code, principal.actor())
    return f"Schedule {code}: override cleared."
