"""The log read's plan on a table that was never analyzed (a bulk load, autovacuum off).

With the horizon as the index's second bound, such a table is estimated at 0.5 % of its
rows: the planner then sorted every event after `after` for each page (quadratic in the
log for a reader such as verify). With the horizon as a filter the estimate is a
share of the table, and from ≈ 200k events the page comes off the primary key in order
(below that the planner may still sort the rest of a small table: ≈ 35-45 ms a page at
120-160k events, measured).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from jobledger.storage.postgres import PostgresStore
from tests.factories.postgres import make_store
from tests.integration.test_postgres_explain import explain

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
FROM generate_series(1, 250000) AS i""",
                {"now": datetime(2026, 3, 2, tzinfo=UTC)},
            )
            cur = await conn.execute(
                "SELECT last_analyze, last_autoanalyze FROM pg_stat_user_tables"
                " WHERE schemaname = %s AND relname = 'events'",
                (store.s,),
            )
            assert await cur.fetchone() in ((None, None), None)  # no statistics yet
        for after in (1000, 125_000):
            params = {"after": after, "below": 2**62, "limit": 2000}
            nodes = await explain(store, store.sql.read_log, params)
            kinds = [n["Node Type"] for n in nodes]
            assert "Sort" not in kinds, kinds
            assert any(
                n["Node Type"] == "Index Scan" and n.get("Index Name") == "events_pkey"
                for n in nodes
            ), kinds
        rows = await store.log.read_log_rows(1000, limit=5)
        assert [row[0] for row in rows] == [1001, 1002, 1003, 1004, 1005]
