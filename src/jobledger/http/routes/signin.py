"""Signing in to the admin page: a POST form with an API key, or a one-time link; and
signing out.

A successful sign-in sets a signed, expiring session cookie (`jobledger.http.session`);
the key itself is never stored in the browser and never accepted in a URL. Failed
sign-ins are logged without the key and count against the client's budget
(`FailureLimiter`, shared with the API's 401s); past it the form answers 429.

Both forms carry a token: the sign-in form the one bound to the browser's pre-session
cookie (set by the form's answer), the sign-out form the page's token of the signed-in
principal. A post without the right token is refused with 403 and changes nothing;
`jobledger.http.security.SameOriginPosts` has already refused posts from another origin.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from jobledger.http.auth import PAGE_COOKIE, ApiKeys, csrf_ok
from jobledger.http.routes._guard import client_of, record_failure
from jobledger.http.routes.page_base import error_page, principal_of, render, safe_next
from jobledger.http.session import (
    PRESESSION_COOKIE,
    SESSION_TTL_S,
    FailureLimiter,
    SigninTokens,
    make_session,
    presession,
    signin_token,
    signin_token_ok,
)


def _signed_in(request: Request, kid: str, nxt: str) -> Response:
    response = RedirectResponse(nxt, status_code=303)
    response.set_cookie(
        PAGE_COOKIE,
        make_session(request.app.state.csrf_secret, kid),
        max_age=SESSION_TTL_S,
        path="/admin",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    response.delete_cookie(PRESESSION_COOKIE, path="/admin")
    return response


def _form(request: Request, nxt: str, status: int, problem: str | None = None) -> Response:
    """The sign-in form, with the token of the browser's pre-session (kept when its
    cookie is well-formed, else a new one set with this answer)."""
    pre = presession(request.cookies.get(PRESESSION_COOKIE))
    token = signin_token(request.app.state.csrf_secret, pre)
    response = render(
        request,
        "login.html",
        None,
        {"title": "Sign in", "next": nxt, "problem": problem, "signin_csrf": token},
        status,
    )
    if request.cookies.get(PRESESSION_COOKIE) != pre:
        response.set_cookie(
            PRESESSION_COOKIE,
            pre,
            path="/admin",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
    return response


def _limited(request: Request, nxt: str) -> Response | None:
    limiter: FailureLimiter = request.app.state.auth_failures
    wait = limiter.retry_after(client_of(request))
    if wait is None:
        return None
    response = _form(request, nxt, 429, f"Too many failed sign-ins: try again in {wait} s.")
    response.headers["Retry-After"] = str(wait)
    return response


async def login(request: Request) -> Response:
    keys: ApiKeys | None = request.app.state.keys
    if request.method == "GET":
        nxt = safe_next(request.query_params.get("next"))
        token = request.query_params.get("token")
        if "key" in request.query_params:
            return _form(
                request,
                nxt,
                400,
                "API keys are not accepted in links (they stay in browser history): "
                "paste the key here.",
            )
        if token is None:
            return _form(request, nxt, 200)
        limited = _limited(request, nxt)
        if limited is not None:
            return limited
        tokens: SigninTokens = request.app.state.signin_tokens
        kid = tokens.redeem(token)
        if kid is None or keys is None or keys.by_key_id(kid) is None:
            record_failure(request, "sign-in link refused")
            return _form(request, nxt, 401, "This sign-in link is used up or expired.")
        return _signed_in(request, kid, nxt)
    form = await request.form()
    nxt = safe_next(str(form.get("next", "")))
    limited = _limited(request, nxt)
    if limited is not None:
        return limited
    given = form.get("csrf")
    cookie = request.cookies.get(PRESESSION_COOKIE)
    if not isinstance(given, str) or not signin_token_ok(
        request.app.state.csrf_secret, cookie, given
    ):
        return _form(request, nxt, 403, "The sign-in form expired: try again.")
    kid = keys.key_id(str(form.get("key", "")).strip()) if keys is not None else None
    if kid is None:
        record_failure(request, "sign-in failed")
        return _form(request, nxt, 401, "That key is not valid.")
    return _signed_in(request, kid, nxt)


async def logout(request: Request) -> Response:
    principal = await principal_of(request)
    if principal is not None:
        form = await request.form()
        token = form.get("csrf")
        if not isinstance(token, str) or not csrf_ok(
            request.app.state.csrf_secret, principal, token
        ):
            return error_page(
                request,
                principal,
                403,
                "Forbidden",
                "The sign-out form expired: reload the page and try again.",
            )
    response = RedirectResponse("/admin/login", status_code=303)
    response.delete_cookie(PAGE_COOKIE, path="/admin")
    return response
