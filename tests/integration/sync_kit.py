"""A running app and sync connections to its database, on SQLite and on PostgreSQL:
what the sync-caller tests (raw drivers, SQLAlchemy, Django) share.

The app's pod runs for real (lanes, feed, watcher); its safety poll is set to a minute,
so a job delivered within a test's few seconds was delivered by the wake-up its commit
sent (NOTIFY, or SQLite's data_version watch), not found by a poll.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from jobledger import App
from jobledger.config.settings import Settings
from jobledger.domain.errors import InvalidArgument, InvalidPayload, JobledgerError, UnknownTarget
from jobledger.domain.jobs import Job

LONG = "mail:welcome"
FAST = "fast:audit"
SETTINGS = Settings(safety_poll_s=60.0, max_payload_bytes=1000)

#: what each helper must refuse as the async path does (test_sync_enqueue.py runs the
#: whole table of tests/contract/writes/test_enqueue_input.py through the shared sync core):
#: (enqueue options, the error, what it says)
REFUSED: list[tuple[dict[str, Any], type[JobledgerError], str]] = [
    ({"target": "nope"}, UnknownTarget, "nope"),
    ({"payload": {"blob": "x" * 2000}}, InvalidPayload, "over the 1000-byte limit"),
    ({"payload": {"x": object()}}, InvalidPayload, "not JSON"),
    ({"payload": {"n": 2**63}}, InvalidPayload, "64-bit range"),
    ({"key": ""}, InvalidArgument, "key must not be empty"),
    ({"dedupe_key": ""}, InvalidArgument, "dedupe_key"),
    ({"code": "c" * 513}, InvalidArgument, "code is 513 bytes"),
]


def each_refused(enqueue: Callable[..., Any]) -> None:
    """Call `enqueue(target, payload, **options)` with every REFUSED input; each must
    raise its error before anything is written."""
    for given, error, says in REFUSED:
        options = {"target": FAST, "payload": {"ok": 1}, **given}
        with pytest.raises(error, match=says):
            enqueue(options.pop("target"), options.pop("payload"), **options)


@dataclass
class SyncKit:
    """`app` (started, workers on) over `name`'s store; `connect()` opens a sync DBAPI
    connection to the same database, not in autocommit; `table` is where the tests'
    business rows go (`users (name text)`), `mark` the driver's parameter marker."""

    name: str
    app: App
    connect: Callable[[], Any]
    table: str
    mark: str
    url: str  # a SQLAlchemy URL of the same database
    delivered: list[Any] = field(default_factory=list)

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """A connection of the caller's own: committed on success, rolled back on an
        error, closed either way."""
        conn = self.connect()
        try:
            yield conn
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        finally:
            conn.close()

    def insert_user(self, conn: Any, name: str) -> None:
        conn.execute(f"INSERT INTO {self.table} (name) VALUES ({self.mark})", (name,))

    def users(self) -> list[str]:
        with closing(self.connect()) as conn:
            rows = conn.execute(f"SELECT name FROM {self.table} ORDER BY name").fetchall()
            conn.rollback()
        return [r[0] for r in rows]


def declare(kit: SyncKit) -> None:
    app = kit.app

    @app.target(LONG, lane="long", delivery_mode="at_least_once")
    async def welcome(job: Job) -> None:
        kit.delivered.append(job.payload)

    @app.target(FAST, lane="fast")
    async def audit(job: Job) -> None:
        kit.delivered.append(job.payload)


@asynccontextmanager
async def running(name: str, tmp_path: Path) -> AsyncIterator[SyncKit]:
    """The kit of store `name` ("sqlite" or "postgres"), its app started."""
    if name == "sqlite":
        path = tmp_path / "shop.db"
        kit = SyncKit(
            name,
            App(store=f"sqlite:///{path}", settings=SETTINGS),
            lambda: sqlite3.connect(path),
            "users",
            "?",
            f"sqlite:///{path}",
        )
        async with _started(kit):
            yield kit
        return
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    from jobledger.storage.postgres import PostgresStore
    from tests.factories.postgres import fresh_schema

    async with fresh_schema() as (dsn, schema):
        info = conninfo_to_dict(dsn)
        kit = SyncKit(
            name,
            App(store=PostgresStore(dsn, schema=schema), settings=SETTINGS),
            lambda: psycopg.connect(dsn),
            f'"{schema}".users',
            "%s",
            f"postgresql+psycopg://{info.get('user', 'postgres')}@{info.get('host', '127.0.0.1')}"
            f":{info.get('port', 5432)}/{info['dbname']}",
        )
        async with _started(kit):
            yield kit


@asynccontextmanager
async def _started(kit: SyncKit) -> AsyncIterator[None]:
    declare(kit)
    await kit.app.start()
    try:
        with closing(kit.connect()) as conn:
            conn.execute(f"CREATE TABLE {kit.table} (name text NOT NULL)")
            conn.commit()
        yield
    finally:
        await kit.app.stop()


def configure_django() -> None:
    """Django's settings for the tests (once a process): `default` a SQLite database a
    test points at its own file, `pg` the tests' PostgreSQL database."""
    import django
    from django.conf import settings
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from tests.factories.postgres import TEST_DATABASE, dsn

    if settings.configured:
        return
    pg = conninfo_to_dict(make_conninfo(dsn(), dbname=TEST_DATABASE))
    settings.configure(
        DATABASES={
            "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
            "pg": {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": pg["dbname"],
                "USER": pg.get("user", "postgres"),
                "HOST": pg.get("host", "127.0.0.1"),
                "PORT": pg.get("port", "5432"),
            },
        },
        USE_TZ=True,
    )
    django.setup()
