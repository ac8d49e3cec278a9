"""The PostgreSQL store's liveness tokens (`storage.liveness`; decisions D53, D54).

A pod's token is a session-level advisory lock on a key derived from the schema and the
pod id (`token_key`), held on a connection of the pod's own. The server releases it the
moment that backend ends: the process died (its socket closed), or the backend was
terminated, or the server restarted. The pod learns of a loss from the same connection:
it keeps a read pending on it (`AsyncConnection.notifies`, nothing is LISTENed), which
ends when the server closes it.

Watching costs no statement while nobody dies: each pod blocks, on a second connection
of its own, in `pg_advisory_lock_shared` on the key of the next pod in id order (a ring
over the pods that advertise a token), and the server grants it the moment that pod's
session ends. The watch connection holds no lock while it waits, so the waits never form
a cycle the deadlock detector would break. A wait is cancelled when the set of pods
changes. Watchers take keys shared (a pod's own session is the only one that takes its
key exclusive): a shared hold is enough to keep a pod from taking its token back while
it is taken over, and two pods confirming one dead pod do not wait for each other.

Which pods hold a token is advertised in their `workers` row (`liveness`, set by every
beat), so a pod of an earlier release, which holds none, is never judged by a free key.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import AsyncIterator, Sequence
from datetime import datetime

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from jobledger.core.tasks import cancel_and_wait
from jobledger.domain.jobs import Job
from jobledger.storage.liveness import Liveness
from jobledger.storage.postgres.connections import Conn, PgConnections
from jobledger.storage.postgres.sql import Statements

logger = logging.getLogger("jobledger.storage")

#: TCP keepalives of the token's own connections, unless the DSN sets them: a pod whose
#: path to the server died notices within ~10 s instead of the system's two hours
KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 4,
    "keepalives_interval": 2,
    "keepalives_count": 3,
}
#: session settings of those connections: a server-wide timeout must not end an idle
#: token or a watch that waits for hours (only the settings this server has are set)
SESSION = """SELECT set_config(name, CASE name WHEN 'lock_timeout' THEN %(lock)s ELSE '0' END,
  false) FROM pg_settings WHERE name IN ('lock_timeout', 'statement_timeout',
  'idle_session_timeout', 'idle_in_transaction_session_timeout')"""
#: the backends holding an advisory lock taken with one bigint key
HOLDER = """SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND classid = %(high)s::bigint::oid AND objid = %(low)s::bigint::oid AND objsubid = 1"""


def token_key(schema: str, pod: str) -> int:
    """The advisory lock key of `pod`'s token in `schema`: 63 bits of a hash, so pods
    of two schemas in one database never share one."""
    digest = hashlib.blake2b(f"jobledger.liveness:{schema}:{pod}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "big") & (2**63 - 1)


def successor(pod: str, pods: Sequence[str]) -> str | None:
    """The pod after `pod` in id order, wrapping round: the one `pod` watches."""
    others = sorted(p for p in pods if p != pod)
    return next((p for p in others if p > pod), others[0] if others else None)


class PgLiveness(Liveness):
    def __init__(self, connections: PgConnections, sql: Statements, pod: str) -> None:
        self.connections = connections
        self.sql = sql
        self.pod = pod
        self.schema = sql.schema.strip('"')  # the name `schema.quoted_schema` checked
        self.key = token_key(self.schema, pod)
        own = conninfo_to_dict(connections.conninfo)
        self._conninfo = make_conninfo(
            connections.conninfo, **{k: v for k, v in KEEPALIVES.items() if k not in own}
        )
        self._token: Conn | None = None
        self._held = False
        self._backend: int | None = None  # the pid of the last session that held the token
        self._monitor: asyncio.Task[None] | None = None
        self._watch: Conn | None = None

    @property
    def held(self) -> bool:
        return self._held

    def key_of(self, pod: str) -> int:
        return token_key(self.schema, pod)

    async def _connect(self, lock_timeout_s: float) -> Conn:
        conn = await psycopg.AsyncConnection.connect(
            self._conninfo, autocommit=True, options=self.connections.options
        )
        try:
            await conn.execute(SESSION, {"lock": str(int(lock_timeout_s * 1000))})
        except BaseException:
            await conn.close()
            raise
        return conn

    # --- this pod's token ---------------------------------------------------------------
    async def hold(self) -> None:
        if self._held:
            return
        await self._drop_token()
        conn = await self._connect(self.hold_wait_s)
        try:
            await self._lock_own(conn)
        except BaseException:
            await conn.close()
            raise
        self._token, self._held, self._backend = conn, True, conn.info.backend_pid
        self._monitor = asyncio.create_task(self._notice_loss(conn), name="jobledger-liveness")

    async def _lock_own(self, conn: Conn) -> None:
        """Lock this pod's key. It may be held for a moment by a pod confirming it free;
        if it is held longer, by this pod's own earlier session (a connection the client
        gave up on while the server kept its backend), that backend is ended first."""
        try:
            await conn.execute("SELECT pg_advisory_lock(%s)", (self.key,))
            return
        except psycopg.errors.LockNotAvailable:
            pass
        cur = await conn.execute(HOLDER, {"high": self.key >> 32, "low": self.key & 0xFFFFFFFF})
        holders = sorted(int(r[0]) for r in await cur.fetchall())
        holder = self._backend
        if holder is None or holders != [holder]:
            raise RuntimeError(
                f"the liveness token of pod {self.pod} is held by backends {holders}:"
                " is another process running as this pod?"
            )
        logger.warning("pod %s: ending its own earlier token session %d", self.pod, holder)
        await conn.execute("SELECT pg_terminate_backend(%s)", (holder,))
        await conn.execute("SELECT pg_advisory_lock(%s)", (self.key,))

    async def _notice_loss(self, conn: Conn) -> None:
        """Wait on the token's connection until the server closes it."""
        with contextlib.suppress(psycopg.Error):
            async for _ in conn.notifies():  # pragma: no cover - nothing LISTENs here
                pass
        if self._token is conn and self._held:
            self._held = False
            logger.warning("pod %s: its liveness token was lost (connection closed)", self.pod)
            if self.on_lost is not None:
                self.on_lost()

    async def _drop_token(self) -> None:
        self._held = False
        monitor, self._monitor = self._monitor, None
        if monitor is not None and monitor is not asyncio.current_task():
            await cancel_and_wait(monitor)
        conn, self._token = self._token, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def release(self) -> None:
        await self._drop_token()
        await self._drop_watch()

    # --- other pods' tokens ------------------------------------------------------------
    async def _watcher(self) -> Conn:
        conn = self._watch
        if conn is None or conn.closed or conn.broken:
            conn = self._watch = await self._connect(0)
        return conn

    async def _drop_watch(self) -> None:
        conn, self._watch = self._watch, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def wait_dead(self, pods: Sequence[str]) -> list[str]:
        target = successor(self.pod, pods)
        if target is None:
            await asyncio.Event().wait()  # nothing to watch: until cancelled
        assert target is not None
        key = self.key_of(target)
        conn = await self._watcher()
        try:
            await conn.execute("SELECT pg_advisory_lock_shared(%s)", (key,))
            await conn.execute("SELECT pg_advisory_unlock_shared(%s)", (key,))
        except BaseException:
            # cancelled (the pods changed) or failed: a lock granted meanwhile goes with
            # the session, never kept by a watch that stopped looking
            await self._drop_watch()
            raise
        return [target]

    @contextlib.asynccontextmanager
    async def confirmed(self, pods: Sequence[str]) -> AsyncIterator[list[str]]:
        keys = {self.key_of(p): p for p in pods}
        conn = await self._watcher()
        try:
            cur = await conn.execute(
                "SELECT k FROM unnest(%s::bigint[]) AS k WHERE pg_try_advisory_lock_shared(k)",
                (list(keys),),
            )
            free = [keys[int(r[0])] for r in await cur.fetchall()]
            yield free
        finally:
            try:
                await conn.execute("SELECT pg_advisory_unlock_all()")
            except BaseException:
                await self._drop_watch()
                raise

    async def take_partitions(
        self, dead: Sequence[str], pod: str, now: datetime, until: datetime
    ) -> list[int]:
        rows = await self.connections.tuples(
            self.sql.take_dead, {"dead": list(dead), "pod": pod, "until": until}
        )
        return sorted(int(r[0]) for r in rows)

    async def claims_of(self, dead: Sequence[str]) -> list[Job]:
        return await self.connections.jobs(self.sql.claims_of, {"dead": list(dead)})
