"""Who is calling: a pluggable `Authenticator`, and bearer API keys as the default.

An authenticator turns a request into a `Principal` (id and role) or None (anonymous).
Two roles exist: `admin` may do everything, `viewer` may only read. The API answers 401
to anonymous callers and 403 to an authenticated non-admin on every write route.

The admin page authenticates with a signed, expiring session cookie made at sign-in
(`jobledger.http.session`), never with the raw key.

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
from jobledger.http.session import key_id, read_session, same_text

PAGE_COOKIE = "jobledger_session"


class Authenticator(Protocol):
    async def authenticate(self, conn: HTTPConnection) -> Principal | None: ...


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


class ApiKeys:
    """Bearer API keys (`Authorization: Bearer <key>`), and optionally a page session.

    The API instance reads the header only; the admin page's instance
    (`with_session(secret)`) also reads the session cookie, whose forms carry a CSRF
    token on top.
    """

    def __init__(self, keys: Mapping[str, Principal]) -> None:
        self._by_digest = {_digest(key): principal for key, principal in keys.items()}
        self._by_kid = {key_id(d): p for d, p in self._by_digest.items()}
        self.session_secret: bytes | None = None

    def with_session(self, secret: bytes) -> ApiKeys:
        clone = ApiKeys({})
        clone._by_digest = self._by_digest
        clone._by_kid = self._by_kid
        clone.session_secret = secret
        return clone

    def lookup(self, key: str) -> Principal | None:
        return self._by_digest.get(_digest(key)) if key else None

    def key_id(self, key: str) -> str | None:
        """The session name of a configured key, or None for an unknown one."""
        digest = _digest(key) if key else b""
        return key_id(digest) if digest in self._by_digest else None

    def by_key_id(self, kid: str) -> Principal | None:
        return self._by_kid.get(kid)

    async def authenticate(self, conn: HTTPConnection) -> Principal | None:
        header = conn.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return self.lookup(token.strip())
        if self.session_secret is not None:
            kid = read_session(self.session_secret, conn.cookies.get(PAGE_COOKIE, ""))
            return self._by_kid.get(kid) if kid is not None else None
        return None

    def session_secret_default(self) -> bytes:
        """A session secret derived from every configured key: the same in every process
        that has the same keys (so API processes behind a balancer share sessions), and
        a new one whenever a key is added or removed (every session ends)."""
        material = b"".join(sorted(self._by_digest))
        return hashlib.sha256(b"jobledger-session-secret\x00" + material).digest()

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
    """Whether `token` is `principal`'s form token (any text is safe to pass)."""
    return same_text(csrf_token(secret, principal), token)
