"""Authentication, authorisation, request context and query parsing for API routes."""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from jobledger.config.api_keys import Principal
from jobledger.core.context import request_context
from jobledger.domain.errors import NotFound
from jobledger.http.auth import Authenticator
from jobledger.http.errors import ApiError, ValidationFailed, clip
from jobledger.http.services import Services
from jobledger.http.session import FailureLimiter

logger = logging.getLogger("jobledger.http")

Handler = Callable[[Request, Principal], Awaitable[Any]]
Endpoint = Callable[[Request], Awaitable[Response]]

_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")


def services(request: Request) -> Services:
    svc: Services = request.app.state.services
    return svc


def traceparent_of(request: Request) -> str | None:
    """A well-formed W3C `traceparent` header (all-zero trace ids are invalid), or None."""
    value = request.headers.get("traceparent", "").strip().lower()
    match = _TRACEPARENT.match(value)
    if match is None or set(match.group(1)) == {"0"}:
        return None
    return value


def client_of(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def refuse_if_limited(request: Request) -> None:
    """429 for a client past its failed-authentication budget (`FailureLimiter`)."""
    limiter: FailureLimiter = request.app.state.auth_failures
    wait = limiter.retry_after(client_of(request))
    if wait is not None:
        raise ApiError(
            429,
            "too_many_requests",
            f"too many failed authentications from this client: retry in {wait} s",
            headers={"Retry-After": str(wait)},
        )


def record_failure(request: Request, what: str, *, count: bool = True) -> None:
    """Log a failed authentication (never the key) and, when a credential was presented
    (`count`), count it against the client's budget."""
    client = client_of(request)
    logger.warning("%s from %s: %s %s", what, client, request.method, request.url.path)
    if count:
        request.app.state.auth_failures.fail(client)


def _presented(request: Request) -> bool:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return bool(scheme.strip() and token.strip())


async def authorise(request: Request, authenticator: Authenticator, *, write: bool) -> Principal:
    refuse_if_limited(request)
    principal = await authenticator.authenticate(request)
    if principal is None:
        record_failure(request, "API authentication failed", count=_presented(request))
        raise ApiError(
            401,
            "unauthorized",
            "a valid API key is required (Authorization: Bearer <key>)",
            headers={"WWW-Authenticate": 'Bearer realm="jobledger"'},
        )
    if write and not principal.is_admin:
        raise ApiError(
            403, "forbidden", f"role {principal.role!r} may not change jobs or schedules"
        )
    return principal


def api(*, write: bool = False, query: tuple[str, ...] = ()) -> Callable[[Handler], Endpoint]:
    """Wrap a handler: authenticate (401), check the role (403 on writes), refuse query
    parameters the route does not know (400, so `?stauts=DEAD` is not silently an
    unfiltered list), then run it under a request context carrying the principal as
    actor and the caller's trace."""
    known = frozenset(query)

    def decorate(handler: Handler) -> Endpoint:
        @functools.wraps(handler)
        async def endpoint(request: Request) -> Response:
            principal = await authorise(request, request.app.state.api_auth, write=write)
            unknown = sorted(set(request.query_params) - known)
            if unknown:
                raise ValidationFailed(
                    [f"property {clip(name, 80)} should not exist" for name in unknown[:10]]
                )
            check_text(request)
            with request_context(
                traceparent=traceparent_of(request), actor=principal.actor()
            ) as ctx:
                result = await handler(request, principal)
            response = result if isinstance(result, Response) else JSONResponse(result)
            if ctx.trace_id:
                response.headers["x-trace-id"] = ctx.trace_id
            return response

        return endpoint

    return decorate


def check_text(request: Request) -> None:
    """No stored text holds U+0000 (PostgreSQL cannot): a path segment carrying one
    names nothing (404), a query value carrying one is malformed (400)."""
    for name, value in request.path_params.items():
        if isinstance(value, str) and "\x00" in value:
            raise NotFound(f"{name} {clip(value, 80)!r} not found")
    for name, value in request.query_params.multi_items():
        if "\x00" in value:
            raise ValidationFailed(f"{name} must not contain U+0000")


def int_param(request: Request, name: str, default: int, *, minimum: int, maximum: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    text = raw.strip()
    if not re.fullmatch(r"[+-]?[0-9]{1,19}", text):
        raise ValidationFailed(f"{name} must be an integer number")
    value = int(text)
    if value < minimum:
        raise ValidationFailed(f"{name} must not be less than {minimum}")
    if value > maximum:
        raise ValidationFailed(f"{name} must not be greater than {maximum}")
    return value


async def json_object(request: Request) -> dict[str, Any]:
    body = await request.body()
    if not body.strip():
        raise ValidationFailed("the request body must be a JSON object")
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValidationFailed(
            f"the request body is not valid JSON: {clip(str(exc), 120)}"
        ) from exc
    except RecursionError as exc:
        raise ValidationFailed("the request body is nested too deeply") from exc
    if not isinstance(value, dict):
        raise ValidationFailed("the request body must be a JSON object")
    return value
