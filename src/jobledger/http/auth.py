"""Who is calling: a pluggable `Authenticator`, and bearer API keys as the default.

An authenticator turns a request into a `Principal` (id and role) or None (anonymous).
Two roles exist: `admin` may do everything, `viewer` may only read. The API answers 401
to anonymous callers and 403 to an authenticated non-admin on every write route.

API keys come from configuration as `key:role:id` items separated by commas, e.g.
`JOBLEDGER_API_KEYS="k3y1:admin:alice,k3y2:viewer:bob"`. Keys are kept only as SHA-256
digests in memory and compared through a digest lookup, so a timing probe learns nothing
about a key's prefix.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from typing import Protocol

from starlette.requests import HTTPConnection

from jobledger.config.api_keys import Principal

PAGE_COOKIE = "jobledger_key"


class Authenticator(Protocol):
    async def authenticate(self, conn: HTTPConnection) -> Principal | None: ...


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


class ApiKeys:
    """Bearer API keys (`Authorization: Bearer <key>`), and optionally a cookie.

    The API instance reads the header only; the admin page's instance also reads the
    login cookie (`cookie=PAGE_COOKIE`), whose forms carry a CSRF token on top.
    """

    def __init__(self, keys: Mapping[str, Principal], *, cookie: str | None = None) -> None:
        self._by_digest = {_digest(key): principal for key, principal in keys.items()}
        self.cookie = cookie

    def with_cookie(self, cookie: str = PAGE_COOKIE) -> ApiKeys:
        clone = ApiKeys({}, cookie=cookie)
        clone._by_digest = self._by_digest
        return clone

    def lookup(self, key: str) -> Principal | None:
        return self._by_digest.get(_digest(key)) if key else None

    async def authenticate(self, conn: HTTPConnection) -> Principal | None:
        header = conn.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return self.lookup(token.strip())
        if self.cookie:
            return self.lookup(conn.cookies.get(self.cookie, ""))
        return None

    def __len__(self) -> int:
        return len(self._by_digest)


def generate_key() -> str:
    """A fresh random admin key (serve and demo print one when none is configured)."""
    return secrets.token_urlsafe(24)


def csrf_token(secret: bytes, principal: Principal) -> str:
    """The admin page's per-principal form token (double submit, keyed by a server secret)."""
    message = f"{principal.id}\x00{principal.role}".encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def csrf_ok(secret: bytes, principal: Principal, token: str) -> bool:
    return hmac.compare_digest(csrf_token(secret, principal), token)
