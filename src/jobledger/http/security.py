"""Response headers every answer carries, the request body limit, the same-origin rule
for the page's forms, and the proxies whose forwarded headers are believed.

`SecureHeaders` adds a Content-Security-Policy that allows scripts, styles and images
from this origin only (no inline script: the page's one script is a static file, its
values travel in data attributes), forbids framing (`frame-ancestors 'none'` and
`X-Frame-Options: DENY`), turns off MIME sniffing, sends the referrer to this origin
only (`same-origin`: a browser then sends the page's own `Origin` on its form posts;
under `no-referrer` it sends `Origin: null`), and marks every answer except the static
files `Cache-Control: no-store` (authenticated pages and API rows must not sit in
shared or browser caches).

`BodyLimit` refuses a request body over `max_bytes` with 413 `payload_too_large`,
whether announced by Content-Length or streamed in chunks, before any route reads it.

`SameOriginPosts` refuses (403) a POST to the page (`/admin…`) whose `Origin` — or,
without one, `Referer` — names another host than the request's `Host`, or is `null`.
The page's forms also carry a token (`jobledger.http.session`); the API authenticates
with a bearer header no other site can make a browser send, so it is not checked.

`ForwardedFrom` takes the client address (and scheme) from `X-Forwarded-For` (and
`X-Forwarded-Proto`) only when the peer is one of the configured proxies
(`forwarded_allow_ips`, none by default). The server itself reads no forwarded header
(`jobledger.pod` runs uvicorn with `proxy_headers` off): otherwise a client on the
same host could name a new address per try and dodge the failed-login limit.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from urllib.parse import urlsplit

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobledger.http.errors import error_response

MAX_BODY_BYTES = 64 * 1024
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
STATIC_PREFIX = "/admin/static/"


class SecureHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = str(scope.get("path", "")).startswith(STATIC_PREFIX)

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["Content-Security-Policy"] = CSP
                headers["X-Frame-Options"] = "DENY"
                headers["X-Content-Type-Options"] = "nosniff"
                headers["Referrer-Policy"] = "same-origin"
                headers["Cross-Origin-Opener-Policy"] = "same-origin"
                if not static:
                    headers["Cache-Control"] = "no-store"
            await send(message)

        await self.app(scope, receive, with_headers)


class _TooLarge(Exception):
    pass


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes
        refusal = error_response(
            413, "payload_too_large", [f"the request body is larger than {limit} bytes"]
        )
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                text = value.decode("latin-1").strip()
                if not text.isascii() or not text.isdigit() or int(text) > limit:
                    await refusal(scope, receive, send)
                    return
        seen = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _TooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except _TooLarge:
            if started:
                raise
            await refusal(scope, receive, send)


PAGE_PREFIX = "/admin"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def same_origin(origin: str, host: str) -> bool:
    """Whether the `Origin` or `Referer` value `origin` names the host:port `host`
    (the scheme is not compared: behind a TLS proxy the server sees http)."""
    try:
        parts = urlsplit(origin.strip())
    except ValueError:
        return False
    return bool(parts.scheme and parts.netloc) and parts.netloc.lower() == host.strip().lower()


class SameOriginPosts:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope.get("method", "GET") not in SAFE_METHODS
            and str(scope.get("path", "")).startswith(PAGE_PREFIX)
        ):
            host = _header(scope, b"host") or ""
            origin = _header(scope, b"origin")
            claimed = origin if origin is not None else _header(scope, b"referer")
            if claimed is not None and not same_origin(claimed, host):
                refusal = error_response(
                    403, "forbidden", ["a form of another site posted here: refused"]
                )
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)


class ForwardedFrom:
    """The client behind trusted proxies: `X-Forwarded-For` is read from the right,
    skipping the addresses of trusted proxies; the first other address is the client."""

    def __init__(self, app: ASGIApp, trusted: Sequence[str] = ()) -> None:
        self.app = app
        self.any = tuple(trusted) == ("*",)
        self.networks = [] if self.any else [ipaddress.ip_network(t) for t in trusted]

    def trusts(self, host: str) -> bool:
        if self.any:
            return True
        try:
            address = ipaddress.ip_address(host.strip())
        except ValueError:
            return False
        return any(address in network for network in self.networks)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = scope.get("client")
        if scope["type"] in ("http", "websocket") and client and self.trusts(client[0]):
            scope = dict(scope)
            forwarded = ",".join(
                value.decode("latin-1")
                for key, value in scope.get("headers", ())
                if key == b"x-forwarded-for"
            )
            if forwarded:
                hops = [hop.strip() for hop in forwarded.split(",") if hop.strip()]
                host = next((hop for hop in reversed(hops) if not self.trusts(hop)), None)
                if host is None and hops:
                    host = hops[0]  # every hop is a trusted proxy: the first one asked
                if host is not None:
                    scope["client"] = (host, 0)
            proto = (_header(scope, b"x-forwarded-proto") or "").strip().lower()
            if proto in ("http", "https") and scope["type"] == "http":
                scope["scheme"] = proto
        await self.app(scope, receive, send)
