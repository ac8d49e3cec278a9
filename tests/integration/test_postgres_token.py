"""A PostgreSQL pod's liveness token (`storage.postgres.liveness`) when the server ends
its session while the pod lives: the pod hears of it at once and can take the token
back; a session of its own that the server kept (the client gave up on it) is ended
when the pod takes its token back; a session of another process keeps it out."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

from jobledger.storage.postgres import PostgresStore
from jobledger.storage.postgres.liveness import PgLiveness, token_key
from tests.factories.postgres import make_store

pytestmark = pytest.mark.postgres


@pytest.fixture
async def pg(tmp_path: Path) -> AsyncIterator[PostgresStore]:
    async with make_store(tmp_path) as store:
        assert isinstance(store, PostgresStore)
        yield store


def liveness(store: PostgresStore, pod: str) -> PgLiveness:
    token = store.coordination.liveness(pod)
    assert isinstance(token, PgLiveness)
    return token


async def holders(store: PostgresStore, key: int) -> list[tuple[int, str]]:
    async with store.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT pid, mode FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND classid = %s::bigint::oid AND objid = %s::bigint::oid AND objsubid = 1",
            (key >> 32, key & 0xFFFFFFFF),
        )
        return [(int(pid), str(mode)) for pid, mode in await cur.fetchall()]


async def test_the_token_is_an_exclusive_advisory_lock_of_the_pods_own_session(
    pg: PostgresStore,
) -> None:
    token = liveness(pg, "pod-a")
    assert token.key == token_key(pg.schema, "pod-a")
    await token.hold()
    [(pid, mode)] = await holders(pg, token.key)
    assert mode == "ExclusiveLock"
    async with pg.pool.connection() as conn:
        assert pid != conn.info.backend_pid  # not a pooled session
    await token.release()
    assert await holders(pg, token.key) == []


async def test_a_terminated_session_is_heard_at_once_and_the_token_taken_back(
    pg: PostgresStore,
) -> None:
    token = liveness(pg, "pod-a")
    lost = asyncio.Event()
    token.on_lost = lost.set
    await token.hold()
    [(pid, _)] = await holders(pg, token.key)
    started = time.monotonic()
    async with pg.pool.connection() as conn:
        await conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    await asyncio.wait_for(lost.wait(), timeout=5)
    assert time.monotonic() - started < 2.0
    assert not token.held
    await token.hold()
    assert token.held
    [(again, _)] = await holders(pg, token.key)
    assert again != pid
    await token.release()


async def test_its_own_session_the_server_kept_is_ended_to_take_the_token_back(
    pg: PostgresStore,
) -> None:
    token = liveness(pg, "pod-a")
    token.hold_wait_s = 0.3
    async with await psycopg.AsyncConnection.connect(pg.dsn, autocommit=True) as stale:
        # what the server still holds for a session this pod gave up on
        await stale.execute("SELECT pg_advisory_lock(%s)", (token.key,))
        token._backend = stale.info.backend_pid  # as if it were the pod's last session
        await token.hold()
        assert token.held
        assert [p for p, _ in await holders(pg, token.key)] != [stale.info.backend_pid]
    await token.release()


async def test_a_session_of_another_process_keeps_the_token_out(pg: PostgresStore) -> None:
    token = liveness(pg, "pod-a")
    token.hold_wait_s = 0.3
    async with await psycopg.AsyncConnection.connect(pg.dsn, autocommit=True) as twin:
        await twin.execute("SELECT pg_advisory_lock(%s)", (token.key,))
        with pytest.raises(RuntimeError, match="another process running as this pod"):
            await token.hold()
        assert not token.held
        assert [p for p, _ in await holders(pg, token.key)] == [twin.info.backend_pid]
