"""Open a store from a URL: the one place that knows every adapter's scheme.

memory://                      in-process (tests, demos)
sqlite:///relative.db          the embedded default (sqlite:////abs/path.db)
postgresql://host/db           psycopg 3
mongodb://host/?replicaSet=rs  a replica set (transactions need one)
"""

from __future__ import annotations

import os

from jobledger.domain.errors import ConfigError
from jobledger.storage.port import Store

DEFAULT_STORE_URL = "sqlite:///jobledger.db"


def store_url(explicit: str | None = None) -> str:
    return explicit or os.environ.get("JOBLEDGER_STORE") or DEFAULT_STORE_URL


def open_store(url: str, *, partitions: int = 64) -> Store:
    """A store for `url`, not yet opened (call `await store.open()`)."""
    scheme = url.split(":", 1)[0].lower()
    if scheme == "memory":
        from jobledger.storage.memory import MemoryStore

        return MemoryStore(partitions)
    if scheme == "sqlite":
        from jobledger.storage.sqlite import SqliteStore

        path = url[len("sqlite:///") :] if url.startswith("sqlite:///") else ""
        if not path:
            raise ConfigError(f"store URL {url!r}: expected sqlite:///file.db")
        return SqliteStore(path, partitions=partitions)
    if scheme in ("postgres", "postgresql"):
        from jobledger.storage.postgres import PostgresStore

        return PostgresStore(url, partitions=partitions)
    if scheme in ("mongodb", "mongodb+srv"):
        from jobledger.storage.mongodb import MongoStore

        return MongoStore(url, partitions=partitions)
    raise ConfigError(
        f"store URL {url!r}: unknown scheme {scheme!r} (memory, sqlite, postgresql, mongodb)"
    )
