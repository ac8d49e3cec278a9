"""Open a store from a URL: the one place that knows every adapter's scheme.

memory://                      in-process (tests, demos)
sqlite:///relative.db          the embedded default (sqlite:////abs/path.db)
postgresql://host/db           psycopg 3 (extra `jobledger[postgres]`); the tables' schema
                               from ?schema=name or options=-csearch_path=name,
                               else `schema=` (the postgres_schema setting), else jobledger
mongodb://host/?replicaSet=rs  a replica set (extra `jobledger[mongo]`); the DEAD-row TTL
                               from ?dead_ttl_seconds=n, else `mongodb_dead_ttl_seconds=`

A URL that cannot work fails here, in one line (ConfigError), before anything is
opened: an adapter whose extra is not installed names the extra, a SQLite file in a
folder that does not exist names the folder.
"""

from __future__ import annotations

import os
from pathlib import Path

from jobledger.domain.errors import ConfigError
from jobledger.storage.port import Store

DEFAULT_STORE_URL = "sqlite:///jobledger.db"

#: the extra that installs each adapter's driver, by the driver's top-level module
_EXTRAS = {"psycopg": "postgres", "psycopg_pool": "postgres", "pymongo": "mongo", "bson": "mongo"}


def store_url(explicit: str | None = None) -> str:
    return explicit or os.environ.get("JOBLEDGER_STORE") or DEFAULT_STORE_URL


def _missing_driver(url: str, exc: ModuleNotFoundError) -> ConfigError:
    top = (exc.name or "").split(".")[0]
    extra = _EXTRAS.get(top)
    if extra is None:
        raise exc
    scheme = url.split(":", 1)[0]
    return ConfigError(
        f"store URL {scheme}://…: the {top} package is not installed;"
        f" install it with: pip install 'jobledger[{extra}]'"
    )


def sqlite_path(url: str) -> str:
    """The file of a sqlite:/// URL; its folder must exist (SQLite creates the file only)."""
    path = url[len("sqlite:///") :] if url.startswith("sqlite:///") else ""
    if not path:
        raise ConfigError(f"store URL {url!r}: expected sqlite:///file.db")
    folder = Path(path).parent
    if not folder.is_dir():
        raise ConfigError(
            f"store URL {url!r}: the folder {folder} does not exist (create it first)"
        )
    return path


def open_store(
    url: str,
    *,
    partitions: int = 64,
    schema: str | None = None,
    mongodb_dead_ttl_seconds: int | None = None,
) -> Store:
    """A store for `url`, not yet opened (call `await store.open()`). `schema`: the
    PostgreSQL schema when the URL names none; `mongodb_dead_ttl_seconds`: the MongoDB
    DEAD-row TTL when the URL names none (other stores ignore them)."""
    scheme = url.split(":", 1)[0].lower()
    if scheme == "memory":
        from jobledger.storage.memory import MemoryStore

        return MemoryStore(partitions)
    if scheme == "sqlite":
        from jobledger.storage.sqlite import SqliteStore

        return SqliteStore(sqlite_path(url), partitions=partitions)
    try:
        if scheme in ("postgres", "postgresql"):
            from jobledger.storage.postgres import PostgresStore
            from jobledger.storage.postgres.url import store_schema

            dsn, named = store_schema(url, schema)
            return PostgresStore(dsn, partitions=partitions, schema=named or "jobledger")
        if scheme in ("mongodb", "mongodb+srv"):
            from jobledger.storage.mongodb import MongoStore

            return MongoStore(url, partitions=partitions, dead_ttl_seconds=mongodb_dead_ttl_seconds)
    except ModuleNotFoundError as exc:
        raise _missing_driver(url, exc) from exc
    raise ConfigError(
        f"store URL {url!r}: unknown scheme {scheme!r} (memory, sqlite, postgresql, mongodb)"
    )
