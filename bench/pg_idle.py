"""Statements per second an idle PostgresStore issues (goal: none but heartbeats).

The bench needs no server extension (such as pg_stat_statements): it counts the
transactions of its own database in pg_stat_database (xact_commit + xact_rollback;
every statement outside a transaction block is one). The baseline is the same window with no store open, in
the same run; the bench's own counter reads are subtracted.

    .venv/bin/python bench/pg_idle.py [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio

import psycopg
from pg_common import DATABASE, bench_dsn, fresh_store, line


async def transactions(dsn: str) -> int:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        cur = await conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
            (DATABASE,),
        )
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])


async def window(dsn: str, seconds: float) -> float:
    before = await transactions(dsn)
    await asyncio.sleep(seconds)
    await asyncio.sleep(0.6)  # stats are flushed at most every 500 ms
    after = await transactions(dsn)
    return (after - before - 3) / seconds  # minus this bench's own reads (~3)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    dsn = await bench_dsn()
    base = await window(dsn, args.seconds)
    async with fresh_store() as store:
        feed = store.feed()
        waiting = asyncio.ensure_future(anext(feed))  # a subscriber, as a lane would be
        await asyncio.sleep(1)
        ours = await window(dsn, args.seconds)
        waiting.cancel()
    print(f"(d) statements per second of the bench database over {args.seconds:.0f} s")
    print(line("baseline: no store open", base, "stmt/s"))
    print(line("store open, feed subscribed, idle", ours, "stmt/s"))
    print(line("difference", ours - base, "stmt/s"))


if __name__ == "__main__":
    asyncio.run(main())
