"""A takeover's read of the in-flight rows, before and after the table that names them
(`marks`, migration 8; `inflight` before it), on a deep backlog, alternating in one run.

    .venv/bin/python bench/pg_takeover.py [--rows 1000000] [--marked 64] [--pairs 7]

Rows are generated with set-based SQL straight into `jobs` (this measures the read, not
the enqueue), the last PENDING row of each of the first `--marked` partitions carrying
an at-most-once mark (a partition has at most one) named in `marks`, then `VACUUM
ANALYZE`. Each pair times the read a pod makes for every partition it takes
at start (`inflight_in` of all 64): first the statement before migration 5 (the marked
rows found among every PENDING row of those partitions), then the one after (through
`marks`, each row by the primary key), or the other way round in odd pairs. Prints
both times, the ratio of each pair, their median and spread, the rows found (the same
on both sides) and the load average. Plain script, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

import psycopg
from pg_claim import POPULATE
from pg_common import fresh_store

from jobledger.storage.postgres.sql import JOB_SELECT


def before_sql(s: str) -> str:
    """`Statements.inflight_in` as it was before migration 5."""
    return (
        f"SELECT {JOB_SELECT} FROM {s}.jobs WHERE partition = ANY(%(parts)s)"
        " AND lane = 'fast' AND status = 'PENDING' AND inflight_token IS NOT NULL"
        " ORDER BY partition, id"
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--marked", type=int, default=64)
    parser.add_argument("--pairs", type=int, default=7)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    async with fresh_store() as store:
        s = store.s
        began = time.perf_counter()
        async with store.pool.connection() as conn:
            await conn.execute(POPULATE.format(s=s), {"n": args.rows})
            await conn.execute(
                f"UPDATE {s}.jobs SET inflight_token = 'tok', claimed_by = 'gone'"
                f" WHERE id IN (SELECT DISTINCT ON (partition) id FROM {s}.jobs"
                " WHERE lane = 'fast' AND status = 'PENDING' AND partition < %(marked)s"
                " ORDER BY partition, order_key DESC, version DESC, id DESC)",
                {"marked": args.marked},
            )
            await conn.execute(
                f"INSERT INTO {s}.marks (partition, id)"
                f" SELECT partition, id FROM {s}.jobs WHERE inflight_token IS NOT NULL"
            )
        async with await psycopg.AsyncConnection.connect(store.dsn, autocommit=True) as raw:
            await raw.execute(f"VACUUM ANALYZE {s}.jobs")
            await raw.execute(f"VACUUM ANALYZE {s}.marks")
        print(f"generated {args.rows} rows in {time.perf_counter() - began:.1f} s")
        parts = {"parts": list(range(64))}
        sides = {"before": before_sql(s), "after": store.sql.inflight_in}
        times: dict[str, list[float]] = {"before": [], "after": []}
        found: dict[str, int] = {}
        for pair in range(args.pairs):
            order = ["before", "after"] if pair % 2 == 0 else ["after", "before"]
            for side in order:
                async with store.pool.connection() as conn:
                    started = time.perf_counter()
                    cur = await conn.execute(sides[side], parts)
                    found[side] = len(await cur.fetchall())
                    times[side].append(time.perf_counter() - started)
            b, a = times["before"][-1], times["after"][-1]
            print(
                f"  pair {pair}: before {b * 1000:8.2f} ms, after {a * 1000:6.2f} ms, {b / a:7.1f}x"
            )
        ratios = [b / a for b, a in zip(times["before"], times["after"], strict=True)]
        print(
            f"rows found: before {found['before']}, after {found['after']};"
            f" median before {statistics.median(times['before']) * 1000:.2f} ms,"
            f" after {statistics.median(times['after']) * 1000:.2f} ms;"
            f" ratio median {statistics.median(ratios):.1f}x"
            f" ({min(ratios):.1f}-{max(ratios):.1f}, n={len(ratios)})"
        )
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    asyncio.run(main())
