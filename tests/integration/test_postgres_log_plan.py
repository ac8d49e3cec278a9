"""The log read's plan on a table that was never analyzed (a bulk load, autovacuum off).

With the horizon as a second index bound, such a table is estimated at a handful of
rows: the planner then sorted every event after `after` for each page (quadratic in
the log for a reader such as verify). The page must come off the primary key in order.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from jobledger.storage.postgres import PostgresStore
from tests.factories.postgres import make_store
from tests.integration.test_postgres_explain import walk

pytestmark = pytest.mark.postgres


async def test_a_page_of_an_unanalyzed_log_is_read_off_the_index_in_order(
    tmp_path: Path,
) -> None:
    async with make_store(tmp_path) as store:
        assert isinstance(store, PostgresStore)
        async with store.pool.connection() as conn:
            await conn.execute(
                f"""
INSERT INTO {store.s}.events (position, stream, version, type, data, at, prev_hash, hash)
SELECT i, 'job:' || i, 1, 'JobEnqueued', '{{}}'::json, %(now)s, '', 'h'
FROM generate_series(1, 30000) AS i""",
                {"now": datetime(2026, 3, 2, tzinfo=UTC)},
            )
            cur = await conn.execute(
                "SELECT last_analyze, last_autoanalyze FROM pg_stat_user_tables"
                " WHERE schemaname = %s AND relname = 'events'",
                (store.s,),
            )
            assert await cur.fetchone() in ((None, None), None)  # no statistics yet
        params = {"after": 1000, "below": 2**62, "limit": 2000}
        async with store.pool.connection() as conn, conn.transaction():
            await conn.execute(store.sql.running)  # as the read does, in its transaction
            cur = await conn.execute("EXPLAIN (FORMAT JSON) " + store.sql.read_log, params)
            plan = await cur.fetchone()
        assert plan is not None
        nodes = walk(plan[0][0]["Plan"])
        kinds = [n["Node Type"] for n in nodes]
        assert "Sort" not in kinds, kinds
        assert any(
            n["Node Type"] == "Index Scan" and n.get("Index Name") == "events_pkey" for n in nodes
        ), kinds
        async with store.pool.connection() as conn:  # the transaction's settings are gone
            cur = await conn.execute("SELECT current_setting('enable_seqscan')")
            assert await cur.fetchone() == ("on",)
        rows = await store.read_log_rows(1000, limit=5)
        assert [row[0] for row in rows] == [1001, 1002, 1003, 1004, 1005]
