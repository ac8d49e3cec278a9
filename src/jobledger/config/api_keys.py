"""API keys and the principals they stand for: `key[:role[:id]]` items, checked at start-up.

The configuration loader validates `JOBLEDGER_API_KEYS` with `parse_api_keys`; the HTTP layer
authenticates requests against the same mapping (`jobledger.http.auth`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from jobledger.domain.errors import ConfigError
from jobledger.domain.events import Actor

ADMIN = "admin"
VIEWER = "viewer"
ROLES = (ADMIN, VIEWER)


@dataclass(frozen=True, slots=True)
class Principal:
    id: str
    role: str

    @property
    def is_admin(self) -> bool:
        return self.role == ADMIN

    def actor(self) -> Actor:
        """The actor recorded on every event this principal causes."""
        return Actor(id=self.id, via="http", role=self.role)


def parse_api_keys(text: str | Iterable[str]) -> dict[str, Principal]:
    """`key:role:id,…` → {key: Principal}. Raises ConfigError on a malformed item.

    A bare `key` is an admin named `apikey<n>` (n = its 1-based place in the list);
    `key:role` is named after its role and place (`viewer2`).
    """
    items = text.split(",") if isinstance(text, str) else list(text)
    keys: dict[str, Principal] = {}
    for place, raw in enumerate(items, start=1):
        item = raw.strip()
        if not item:
            continue
        parts = [p.strip() for p in item.split(":")]
        if len(parts) == 1:
            parts = [parts[0], ADMIN, f"apikey{place}"]
        elif len(parts) == 2:
            parts = [*parts, f"{parts[1]}{place}"]
        if len(parts) != 3 or not all(parts):
            raise ConfigError(f"API key item {_redact(item)!r}: expected key:role:id")
        key, role, ident = parts
        if role not in ROLES:
            raise ConfigError(f"API key for {ident!r}: role {role!r} is not one of {ROLES}")
        if len(key) < 8:
            raise ConfigError(f"API key for {ident!r}: a key needs at least 8 characters")
        if key in keys:
            raise ConfigError(f"API key for {ident!r}: the same key is configured twice")
        keys[key] = Principal(ident, role)
    return keys


def _redact(item: str) -> str:
    key, sep, rest = item.partition(":")
    return f"{key[:2]}…{sep}{rest}" if sep else f"{item[:2]}…"
