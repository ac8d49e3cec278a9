"""The admin page's sign-in: signed, expiring sessions, one-time sign-in links, and a
per-client limit on failed authentications.

The page cookie never holds an API key. It holds `<key id>.<expiry>.<signature>`: the
key id is a one-way digest of the key's SHA-256 (so a leaked cookie does not reveal
the key), the expiry is Unix seconds, the signature an HMAC-SHA256 of both under the
application's session secret. A session dies when it expires, when the key it was
made from is removed from the configuration, or when the secret changes.

`serve` and `demo` print a sign-in link carrying a one-time token instead of a key:
the token is redeemed once (the first visit), lives ten minutes, and is useless in
browser history afterwards.

The sign-in form itself is bound to a pre-session: the form's answer sets a random
cookie (`PRESESSION_COOKIE`) and the form carries `signin_token(secret, cookie)`. A
post needs both to match, so another site cannot sign a browser in under the
attacker's key (login CSRF): it can make the browser post, but cannot read the token.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable

logger = logging.getLogger("jobledger.http")

SESSION_TTL_S = 8 * 3600
SIGNIN_TTL_S = 600
MAX_SIGNIN_TOKENS = 64
_SESSION = re.compile(r"([0-9a-f]{32})\.([0-9]{1,12})\.([0-9a-f]{64})", re.ASCII)
PRESESSION_COOKIE = "jobledger_presession"
_PRESESSION = re.compile(r"[A-Za-z0-9_-]{43}", re.ASCII)


def key_id(digest: bytes) -> str:
    """The session's name for a key: 128 bits of a digest of the key's SHA-256."""
    return hashlib.sha256(b"jobledger-session-key\x00" + digest).hexdigest()[:32]


def same_text(expected: str, given: str) -> bool:
    """Whether `given` equals `expected`, in constant time for equal lengths. Compared as
    UTF-8 bytes: `hmac.compare_digest` raises TypeError on a `str` holding non-ASCII, and
    `given` comes from a cookie or a form field, where anyone can put any text."""
    return hmac.compare_digest(
        expected.encode("utf-8", "surrogatepass"), given.encode("utf-8", "surrogatepass")
    )


def _sign(secret: bytes, payload: str) -> str:
    return hmac.new(secret, payload.encode(), hashlib.sha256).hexdigest()


def make_session(secret: bytes, kid: str, *, now: float | None = None) -> str:
    expiry = int((time.time() if now is None else now) + SESSION_TTL_S)
    payload = f"{kid}.{expiry}"
    return f"{payload}.{_sign(secret, payload)}"


def read_session(secret: bytes, value: str, *, now: float | None = None) -> str | None:
    """The key id of a well-formed, correctly signed, unexpired session, else None."""
    match = _SESSION.fullmatch(value)
    if match is None:
        return None
    kid, expiry, signature = match.groups()
    if not same_text(_sign(secret, f"{kid}.{expiry}"), signature):
        return None
    if int(expiry) < (time.time() if now is None else now):
        return None
    return kid


def presession(cookie: str | None) -> str:
    """The browser's pre-session id: its cookie when well-formed, else a new one."""
    if cookie is not None and _PRESESSION.fullmatch(cookie):
        return cookie
    return secrets.token_urlsafe(32)


def signin_token(secret: bytes, pre: str) -> str:
    """The sign-in form's token for the pre-session `pre`."""
    return hmac.new(secret, b"signin\x00" + pre.encode(), hashlib.sha256).hexdigest()


def signin_token_ok(secret: bytes, cookie: str | None, token: str) -> bool:
    """Whether `token` is the sign-in token of the well-formed pre-session `cookie`."""
    if cookie is None or not _PRESESSION.fullmatch(cookie):
        return False
    return same_text(signin_token(secret, cookie), token)


class SigninTokens:
    """One-time sign-in tokens: `issue(kid)` → token, `redeem(token)` → kid once."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._tokens: OrderedDict[bytes, tuple[str, float]] = OrderedDict()

    def issue(self, kid: str) -> str:
        token = secrets.token_urlsafe(24)
        self._tokens[hashlib.sha256(token.encode()).digest()] = (kid, self._clock() + SIGNIN_TTL_S)
        while len(self._tokens) > MAX_SIGNIN_TOKENS:
            self._tokens.popitem(last=False)
        return token

    def redeem(self, token: str) -> str | None:
        found = self._tokens.pop(hashlib.sha256(token.encode()).digest(), None)
        if found is None or found[1] < self._clock():
            return None
        return found[0]


class FailureLimiter:
    """At most `limit` failed authentications per client address in `window_s`; past
    that, the client is refused (429) until its oldest failure leaves the window.
    Keeps at most `max_clients` addresses (the least recently failing are forgotten)."""

    def __init__(
        self,
        limit: int = 30,
        window_s: float = 60.0,
        *,
        max_clients: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.window_s = window_s
        self.max_clients = max_clients
        self._clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, client: str) -> deque[float] | None:
        times = self._failures.get(client)
        if times is None:
            return None
        cutoff = self._clock() - self.window_s
        while times and times[0] <= cutoff:
            times.popleft()
        if not times:
            del self._failures[client]
            return None
        return times

    def retry_after(self, client: str) -> int | None:
        """Seconds until `client` may try again, or None when it is not blocked."""
        times = self._recent(client)
        if times is None or len(times) < self.limit:
            return None
        return max(1, int(times[0] + self.window_s - self._clock()) + 1)

    def fail(self, client: str) -> None:
        times = self._recent(client)
        if times is None:
            times = self._failures[client] = deque(maxlen=self.limit)
        times.append(self._clock())
        self._failures.move_to_end(client)
        while len(self._failures) > self.max_clients:
            self._failures.popitem(last=False)
