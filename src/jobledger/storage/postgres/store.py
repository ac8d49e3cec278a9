"""The PostgreSQL store: psycopg 3 async, a connection pool, LISTEN/NOTIFY wake-ups.

The decisions are the domain's; this adapter only stores them. The store is the bundle
of its roles, one class each over the shared `PgConnections` (`connections.py`: the pool
and the wake connection) and the statements of its schema (`sql.py`): the write path
(`writes.py`: one set-based statement per call, COPY for large enqueue batches), the
queue reads (`queue.py`), the coordination rows (`coordination.py`), the log and its
archive cut (`log.py`), the admin reads (`admin.py`) and the projection state
(`projections.py`). This module keeps the life cycle and the change feed (`listen.py`).
See docs/postgres.md.
"""

from __future__ import annotations

from psycopg_pool import AsyncConnectionPool

from jobledger.storage.feed import LocalFeed, Subscription
from jobledger.storage.port import Store
from jobledger.storage.postgres import schema, sql
from jobledger.storage.postgres.admin import PgAdmin
from jobledger.storage.postgres.connections import Conn, PgConnections
from jobledger.storage.postgres.coordination import PgCoordination
from jobledger.storage.postgres.listen import Listener
from jobledger.storage.postgres.log import PgLog, PgRetention
from jobledger.storage.postgres.projections import PgProjections
from jobledger.storage.postgres.queue import PgQueue
from jobledger.storage.postgres.writes import PgWrites


class PostgresStore(Store):
    name = "postgres"
    writes: PgWrites
    queue: PgQueue
    coordination: PgCoordination
    log: PgLog
    admin: PgAdmin
    retention: PgRetention
    projections: PgProjections

    def __init__(
        self,
        dsn: str,
        *,
        partitions: int = 64,
        schema: str = "jobledger",
        pool_min: int = 1,
        pool_max: int = 10,
        listen_retry_s: float = 1.0,
    ) -> None:
        self.dsn = dsn
        self.partitions = partitions
        self.schema = schema
        self.sql = statements = sql.build(schema)
        self.s = statements.schema
        self.connections = connections = PgConnections(
            dsn, name=f"jobledger-{schema}", pool_min=pool_min, pool_max=pool_max
        )
        self._feed = LocalFeed()
        self._listener = Listener(
            connections.conninfo, statements.channel, self._feed, retry_s=listen_retry_s
        )
        self._feed.source = self._listener  # LISTEN only while the feed has a subscriber
        self.writes = PgWrites(connections, statements)
        self.queue = PgQueue(connections, statements)
        self.coordination = PgCoordination(connections, statements)
        self.log = PgLog(connections, statements)
        self.admin = PgAdmin(connections, statements)
        self.retention = PgRetention(connections, statements)
        self.projections = PgProjections(connections, statements)

    @property
    def pool(self) -> AsyncConnectionPool[Conn]:
        return self.connections.pool

    @property
    def listener(self) -> Listener:
        return self._listener

    # --- life cycle ----------------------------------------------------------------------
    async def open(self) -> None:
        await self.connections.open()
        async with self.pool.connection() as conn:
            await schema.migrate(conn, self.schema)

    async def migrate(self) -> int:
        async with self.pool.connection() as conn:
            return await schema.migrate(conn, self.schema)

    async def close(self) -> None:
        await self.coordination.close()
        await self._listener.stop()
        self._feed.close()
        await self.connections.close()

    # --- the change feed -----------------------------------------------------------------
    def feed(self) -> Subscription:
        return self._feed.subscribe()
