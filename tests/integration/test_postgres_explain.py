"""The hot queries use their indexes on a realistic queue (reference gap G10).

100,000 job rows and 100,000 events are generated with set-based SQL, analysed, and
every lane read, the timer query, the log reads and the admin filters are EXPLAINed:
none may scan `jobs` or `events` sequentially, and each uses the index built for it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from jobledger.domain import job_commands
from jobledger.domain.jobs import JobStatus, Lane, NewJob, Stamp
from jobledger.storage.port import JobFilter
from jobledger.storage.postgres import PostgresStore, encode
from tests.factories.postgres import make_store

pytestmark = pytest.mark.postgres

ROWS = 100_000
NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def populate_sql(s: str) -> list[str]:
    return [
        f"""
INSERT INTO {s}.jobs (id, code, target, lane, key, partition, version, payload, dedupe_key,
  status, attempts, next_run_at, created_at, updated_at, stream_version, last_hash,
  lease_until, inflight_token, running_code, order_key)
SELECT lpad(to_hex(i), 32, '0'),
  'kafka:t' || (i %% 50), 'kafka:t' || (i %% 50),
  CASE WHEN i %% 10 = 7 OR i %% 1000 = 9 THEN 'long' ELSE 'fast' END,
  'k' || (i %% 5000), i %% 64, i, '{{"n": 1}}'::jsonb, 'd' || i,
  CASE WHEN i %% 1000 = 9 THEN 'RUNNING' WHEN i %% 100 = 8 THEN 'DEAD' ELSE 'PENDING' END,
  0, %(now)s::timestamptz + (i %% 600) * interval '1 second', %(now)s, %(now)s, 1, 'h',
  CASE WHEN i %% 1000 = 9 THEN %(now)s::timestamptz + (i %% 7 - 3) * interval '1 minute' END,
  CASE WHEN i %% 5000 = 0 THEN 'tok' END,
  CASE WHEN i %% 1000 = 9 THEN 'schedule:' || i END,
  convert_to('k' || (i %% 5000), 'UTF8')
FROM generate_series(1, {ROWS}) AS i""",
        f"""
INSERT INTO {s}.events (position, stream, version, type, data, at, prev_hash, hash, dedupe_key)
SELECT i, 'job:' || lpad(to_hex(i), 32, '0'), 1, 'JobEnqueued', '{{}}'::json, %(now)s, '', 'h',
  'd' || i
FROM generate_series(1, {ROWS}) AS i""",
        # each partition's row naming a marked row, as the statements that mark write it
        f"INSERT INTO {s}.marks (partition, id)"
        f" SELECT DISTINCT ON (partition) partition, id FROM {s}.jobs"
        " WHERE inflight_token IS NOT NULL ORDER BY partition, id",
        f"ANALYZE {s}.jobs",
        f"ANALYZE {s}.events",
    ]


@pytest.fixture
async def big(tmp_path: Path) -> AsyncIterator[PostgresStore]:
    async with make_store(tmp_path) as store:
        assert isinstance(store, PostgresStore)
        async with store.pool.connection() as conn:
            for sql in populate_sql(store.s):
                await conn.execute(sql, {"now": NOW})
        yield store


def walk(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes += walk(child)
    return nodes


async def explain(store: PostgresStore, sql: str, params: Any) -> list[dict[str, Any]]:
    async with store.pool.connection() as conn:
        cur = await conn.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        row = await cur.fetchone()
    assert row is not None
    return walk(row[0][0]["Plan"])


def check(nodes: list[dict[str, Any]], *indexes: str | None) -> None:
    """No sequential scan of the big tables, and one of `indexes` is used (None: a
    node that uses no index)."""
    scans = [(n["Node Type"], n.get("Relation Name"), n.get("Index Name")) for n in nodes]
    seq = [s for s in scans if s[0] == "Seq Scan" and s[1] in ("jobs", "events")]
    assert seq == [], scans
    assert set(indexes) & {s[2] for s in scans}, scans


async def test_hot_queries_use_their_indexes_on_a_realistic_queue(big: PostgresStore) -> None:
    await lane_reads_and_timers(big)
    await log_reads(big)
    await admin_filters(big)
    await single_writes(big)


def reads_no_log(nodes: list[dict[str, Any]]) -> None:
    """The statement takes its positions from the transaction's counter: nothing but
    the insert touches `events` (no look-up of the range's highest position)."""
    scans = [(n["Node Type"], n.get("Relation Name"), n.get("Index Name")) for n in nodes]
    assert all(kind == "ModifyTable" for kind, rel, _ in scans if rel == "events"), scans
    assert not any(index and index.startswith("events") for *_, index in scans), scans


async def single_writes(big: PostgresStore) -> None:
    """The lean statements of one enqueue and of an at-most-once mark alone: the row by
    the jobs' primary key, the positions without reading the log."""
    (job,) = await big.queue.fast_pending(5, after_key=None, limit=1)
    mark = job_commands.dispatch(job, token="t", pod="pod-a", stamp=Stamp(NOW))
    params = encode.guarded_update_params(mark, "pod-a", NOW)
    nodes = await explain(big, big.sql.guarded_update, params)
    check(nodes, "jobs_pkey")
    reads_no_log(nodes)
    spec = NewJob("kafka:t", {"n": 1}, key="k1")
    opening = job_commands.enqueued(
        job_id="x" * 32,
        spec=spec,
        code="kafka:t",
        lane=Lane.FAST,
        partition=5,
        dedupe_key="x" * 32,
        stamp=Stamp(NOW),
    )
    for sql in (big.sql.enqueue_one, big.sql.enqueue_one_dedupe):
        nodes = await explain(big, sql.decode(), encode.one_params(opening))
        check(nodes, None)  # no scan of the big tables at all
        reads_no_log(nodes)


async def lane_reads_and_timers(big: PostgresStore) -> None:
    q = big.sql
    cases: list[tuple[str, dict[str, Any], str]] = [
        (q.fast_pending_first, {"p": 5, "limit": 100}, "jobs_fast_pending"),
        (q.fast_pending_after, {"p": 5, "limit": 100, "after": b"k2500"}, "jobs_fast_pending"),
        (q.long_candidates, {"now": NOW, "limit": 10}, "jobs_long_pending"),
        (q.long_candidates, {"now": NOW, "limit": 10}, "jobs_running_lease"),
        (q.running_codes, {"now": NOW}, "jobs_running_code"),
        # in-flight rows through the `marks` table, each by the primary key: a takeover
        # of every partition reads the marked rows, not the backlog
        (q.inflight, {"p": 0}, "jobs_pkey"),
        (q.inflight_in, {"parts": list(range(64))}, "jobs_pkey"),
        (q.next_due_fast, {"parts": list(range(64))}, "jobs_fast_due"),
        (q.next_due_long, {}, "jobs_long_pending"),
    ]
    for sql, params, index in cases:
        check(await explain(big, sql, params), *index.split("|"))
    marked = [j.id for j in await big.queue.inflight_in(list(range(64)))]
    named: dict[int, int] = {}  # the first marked row of each partition
    for i in range(5000, ROWS + 1, 5000):
        named.setdefault(i % 64, i)
    assert sorted(marked) == sorted(f"{i:032x}" for i in named.values())
    assert await big.queue.running_codes(NOW) == {
        f"schedule:{i}" for i in range(9, ROWS, 1000) if (i % 7 - 3) > 0
    }


async def log_reads(big: PostgresStore) -> None:
    s = big.s
    check(
        await explain(big, big.sql.read_log, {"after": 50_000, "below": 60_000, "limit": 500}),
        "events_pkey",
    )
    check(
        await explain(
            big,
            f"SELECT * FROM {s}.events WHERE stream = %(s)s ORDER BY version",
            {"s": "job:" + "0" * 31 + "1"},
        ),
        "events_stream_version_key",
    )
    check(
        await explain(
            big,
            f"SELECT dedupe_key FROM {s}.events WHERE dedupe_key = ANY(%(k)s)",
            {"k": ["d1", "d2"]},
        ),
        "events_dedupe",
    )


async def admin_filters(big: PostgresStore) -> None:
    cases = [
        (JobFilter(status=JobStatus.DEAD), "jobs_dead"),
        (JobFilter(target="kafka:t7"), "jobs_by_target"),
        (JobFilter(code="kafka:t7"), "jobs_by_code"),
        (JobFilter(key="k42"), "jobs_by_key"),
        (JobFilter(), "jobs_pkey"),
    ]
    for flt, index in cases:
        page, count, params = big.admin.list_sql(flt)
        check(await explain(big, page, {**params, "offset": 0, "limit": 100}), index)
        if flt != JobFilter():  # an unfiltered total counts every open job
            check(await explain(big, count, params), index)
    rows, total = await big.admin.list_jobs(JobFilter(key="k42"), offset=0, limit=100)
    assert total == ROWS // 5000 and len(rows) == total
    assert [j.id for j in rows] == sorted((j.id for j in rows), reverse=True)


async def test_the_lane_reads_keep_one_plan_on_a_deep_queue(big: PostgresStore) -> None:
    """The lanes' page reads are prepared statements; on 100,000 rows PostgreSQL must
    be able to keep their generic plan instead of planning every call again. With the
    LIMIT a parameter, and the range bounds constants the custom plans could estimate,
    the generic plan cost more than the custom ones and was never used past ~100k
    pending rows (65-90 µs of planning per fast-lane page at 1M, ≈ 250 µs per long-lane
    read, against 3-4 µs)."""
    statements = [
        big.queue.fast_pending_statement(5, after_key=None, limit=100),
        big.queue.fast_pending_statement(5, after_key="k2500", limit=100),
        big.queue.long_candidates_statement(NOW, limit=30),
    ]
    seen = "SELECT name, generic_plans, custom_plans FROM pg_prepared_statements"
    async with big.pool.connection() as conn:
        # A pooled connection may already hold the engine's own prepared statements
        # (its setup, the liveness check); only the ones prepared here are judged.
        before = {name for name, _, _ in await (await conn.execute(seen)).fetchall()}
        for sql, params in statements:
            for _ in range(8):
                await conn.execute(sql, params, prepare=True)
        rows = await (await conn.execute(seen)).fetchall()
        plans = [(generic, custom) for name, generic, custom in rows if name not in before]
    assert len(plans) == len(statements), plans
    assert all(generic > 0 for generic, _ in plans), plans
