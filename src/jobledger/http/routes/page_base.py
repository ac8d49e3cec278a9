"""What every admin page shares: templates, the signed-in principal, rendering with the
one-shot flash message, and the redirect to the sign-in form."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from jobledger.config.api_keys import Principal
from jobledger.http.auth import csrf_token
from jobledger.http.json_html import event_fields, when
from jobledger.http.session import same_text

HERE = Path(__file__).resolve().parent.parent
templates = Jinja2Templates(directory=str(HERE / "templates"))
FLASH_COOKIE = "jobledger_flash"
MAX_FLASH_CHARS = 500


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


templates.env.filters["when"] = when
templates.env.filters["pretty"] = _pretty
templates.env.filters["event_fields"] = event_fields


def safe_next(value: str | None, default: str = "/admin") -> str:
    """Only redirect back inside the page (no open redirect)."""
    if (
        value
        and value.startswith("/admin")
        and "//" not in value
        and "\\" not in value
        and value.isprintable()
    ):
        return value
    return default


async def principal_of(request: Request) -> Principal | None:
    principal: Principal | None = await request.app.state.page_auth.authenticate(request)
    return principal


def login_redirect(request: Request) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/admin/login?{urlencode({'next': target})}", status_code=303)


async def filtered_page_principal(request: Request) -> Principal | Response:
    """The signed-in principal of a page whose query holds filters, or the answer that
    replaces the page: the sign-in redirect, or 400 when a filter holds U+0000 (no
    stored name can, and PostgreSQL refuses it in a query)."""
    principal = await principal_of(request)
    if principal is None:
        return login_redirect(request)
    if any("\x00" in value for _, value in request.query_params.multi_items()):
        return error_page(request, principal, 400, "Bad filter", "Filters must not contain U+0000.")
    return principal


def _flash_sign(secret: bytes, text: str) -> str:
    return hmac.new(secret, b"flash\x00" + text.encode(), hashlib.sha256).hexdigest()


def read_flash(request: Request) -> dict[str, str] | None:
    """The flash message this server set, or None (absent, forged, or malformed)."""
    raw = request.cookies.get(FLASH_COOKIE)
    if not raw:
        return None
    body, _, signature = unquote(raw).rpartition(".")
    if not same_text(_flash_sign(request.app.state.csrf_secret, body), signature):
        return None
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or not all(
        isinstance(value.get(k), str) for k in ("kind", "text")
    ):
        return None
    return {"kind": value["kind"], "text": value["text"]}


def with_flash(request: Request, response: Response, kind: str, text: str) -> Response:
    body = json.dumps({"kind": kind, "text": text[:MAX_FLASH_CHARS]})
    signature = _flash_sign(request.app.state.csrf_secret, body)
    response.set_cookie(
        FLASH_COOKIE,
        quote(f"{body}.{signature}"),
        max_age=60,
        path="/admin",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


def render(
    request: Request,
    name: str,
    principal: Principal | None,
    context: dict[str, Any],
    status_code: int = 200,
) -> Response:
    had_flash = FLASH_COOKIE in request.cookies
    ctx = {
        "principal": principal,
        "csrf": csrf_token(request.app.state.csrf_secret, principal) if principal else "",
        "flash": read_flash(request),
        "here": request.url.path + (f"?{request.url.query}" if request.url.query else ""),
        "can_login": request.app.state.keys is not None,
        **context,
    }
    response = templates.TemplateResponse(request, name, ctx, status_code=status_code)
    if had_flash:
        response.delete_cookie(FLASH_COOKIE, path="/admin")
    return response


def error_page(
    request: Request, principal: Principal | None, status: int, title: str, message: str
) -> Response:
    return render(request, "error.html", principal, {"title": title, "message": message}, status)
