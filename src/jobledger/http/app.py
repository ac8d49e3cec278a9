"""The Starlette application: admin API under /api/v1, the admin page under /admin,
health probes, the OpenAPI document and (when `jobledger.observability.metrics` is present) /metrics.

    app = create_app(services, ApiKeys(parse_api_keys(os.environ["JOBLEDGER_API_KEYS"])))
    uvicorn.run(app, host="127.0.0.1", port=8080)
"""

from __future__ import annotations

import importlib
import logging
import secrets
from collections.abc import Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from jobledger.domain.errors import JobledgerError
from jobledger.http import openapi
from jobledger.http.auth import ApiKeys, Authenticator
from jobledger.http.errors import ApiError, CatchAll, api_error, domain_error, http_error
from jobledger.http.routes import (
    bulk,
    dashboard,
    feed,
    finished,
    health,
    jobs,
    page,
    page_api,
    schedule_history,
    schedules,
)
from jobledger.http.security import BodyLimit, ForwardedFrom, SameOriginPosts, SecureHeaders
from jobledger.http.services import Services
from jobledger.http.session import FailureLimiter, SigninTokens

logger = logging.getLogger("jobledger.http")


async def openapi_json(request: Request) -> Response:
    return JSONResponse(openapi.document())


async def home(request: Request) -> Response:
    return RedirectResponse("/admin", status_code=307)


def _metrics_routes() -> list[BaseRoute]:
    """`/metrics` from `jobledger.observability.metrics` (`asgi_app()`), when that module exists."""
    try:
        metrics = importlib.import_module("jobledger.observability.metrics")
    except ImportError:
        return []
    factory = getattr(metrics, "asgi_app", None)
    if factory is None:
        return []
    # a Route to an ASGI callable answers /metrics itself (a Mount would 307 to /metrics/)
    return [Route("/metrics", endpoint=_Asgi(factory()), methods=["GET"])]


class _Asgi:
    """Wraps an ASGI function so Starlette's Route calls it as an app, not an endpoint."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


def create_app(
    services: Services,
    authenticator: Authenticator,
    *,
    page_authenticator: Authenticator | None = None,
    csrf_secret: bytes | None = None,
    forwarded_allow_ips: Sequence[str] = (),
) -> Starlette:
    """The admin application over `services`.

    `authenticator` guards the API (bearer keys by default). The page uses
    `page_authenticator`; by default the same API keys, read from the signed session
    cookie made at sign-in, or `authenticator` itself when it is not `ApiKeys`.
    `csrf_secret` signs sessions, form tokens and flash messages; by default it is
    derived from the configured keys (the same in every process with the same keys).
    `forwarded_allow_ips`: the proxies whose `X-Forwarded-For` names the client
    (`jobledger.http.security.ForwardedFrom`); none by default.
    """
    if csrf_secret is None:
        csrf_secret = (
            authenticator.session_secret_default()
            if isinstance(authenticator, ApiKeys)
            else secrets.token_bytes(32)
        )
    if page_authenticator is None:
        page_authenticator = (
            authenticator.with_session(csrf_secret)
            if isinstance(authenticator, ApiKeys)
            else authenticator
        )
    api = Mount(
        openapi.PREFIX,
        routes=[
            *jobs.routes(),
            *bulk.routes(),
            *finished.routes(),
            *schedules.routes(),
            *feed.routes(),
            *dashboard.api_routes(),
            *schedule_history.api_routes(),
            Route("/openapi.json", openapi_json, methods=["GET"]),
        ],
    )
    app = Starlette(
        routes=[
            Route("/", home, methods=["GET"]),
            *health.routes(),
            api,
            *page.routes(),
            *page_api.page_routes(),
            *dashboard.page_routes(),
            *schedule_history.page_routes(),
            *_metrics_routes(),
        ],
        exception_handlers={
            ApiError: api_error,
            JobledgerError: domain_error,
            HTTPException: http_error,
        },
        middleware=[
            *([Middleware(ForwardedFrom, forwarded_allow_ips)] if forwarded_allow_ips else []),
            Middleware(SecureHeaders),
            Middleware(CatchAll),
            Middleware(SameOriginPosts),
            Middleware(BodyLimit),
        ],
    )
    app.state.services = services
    app.state.api_auth = authenticator
    app.state.page_auth = page_authenticator
    app.state.keys = authenticator if isinstance(authenticator, ApiKeys) else None
    app.state.csrf_secret = csrf_secret
    app.state.signin_tokens = SigninTokens()
    app.state.auth_failures = FailureLimiter()
    return app


def signin_path(app: Starlette, key: str) -> str | None:
    """A one-time sign-in link path for `key` (what `serve` prints), or None when the
    app does not authenticate with these API keys or `key` is not one of them."""
    keys: ApiKeys | None = app.state.keys
    kid = keys.key_id(key) if keys is not None else None
    if kid is None:
        return None
    tokens: SigninTokens = app.state.signin_tokens
    return f"/admin/login?token={tokens.issue(kid)}"
