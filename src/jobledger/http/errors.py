"""The one error shape of the admin API: `{statusCode, code, message: [..]}`.

Domain errors (`JobledgerError`) carry their own code and status; validation errors
are 400 `validation_failed`; anything unexpected is a 500 with the same shape, logged
here with its stack trace and never sent to the client.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobledger.domain.errors import JobledgerError

logger = logging.getLogger("jobledger.http")

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "invalid_status",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "too_many_requests",
    500: "internal_error",
}


class ApiError(Exception):
    """An error raised by a route, turned into the error body by `api_error`."""

    def __init__(
        self,
        status: int,
        code: str,
        messages: str | Sequence[str],
        headers: dict[str, str] | None = None,
    ) -> None:
        self.status = status
        self.code = code
        self.messages = [messages] if isinstance(messages, str) else list(messages)
        self.headers = headers
        super().__init__(f"{status} {code}: {'; '.join(self.messages)}")


class ValidationFailed(ApiError):
    def __init__(self, messages: str | Sequence[str]) -> None:
        super().__init__(400, "validation_failed", messages)


MAX_MESSAGES = 20
MAX_MESSAGE_CHARS = 300


def clip(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text` cut to `limit` characters (an error never echoes megabytes of input)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def error_body(status: int, code: str, messages: Sequence[str]) -> dict[str, object]:
    return {
        "statusCode": status,
        "code": code,
        "message": [clip(m) for m in list(messages)[:MAX_MESSAGES]],
    }


def error_response(
    status: int, code: str, messages: Sequence[str], headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(error_body(status, code, messages), status_code=status, headers=headers)


async def api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.code, exc.messages, exc.headers)


async def domain_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, JobledgerError)
    return error_response(exc.status, exc.code, [exc.message])


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own 404/405 (unknown route, wrong method) in the API shape."""
    assert isinstance(exc, HTTPException)
    code = _HTTP_CODES.get(exc.status_code, "error")
    return error_response(
        exc.status_code, code, [str(exc.detail)], dict(exc.headers) if exc.headers else None
    )


class CatchAll:
    """Outermost user middleware: an exception that escaped every handler becomes the
    500 body (logged with its trace) instead of propagating to the server."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            logger.error(
                "unhandled error on %s %s", scope.get("method"), scope.get("path"), exc_info=exc
            )
            if started:
                raise
            response = error_response(500, "internal_error", ["internal server error"])
            await response(scope, receive, send)
