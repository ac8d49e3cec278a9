"""Fast-lane claim query latency with 1,000 vs 1,000,000 PENDING rows (goal ratio ≤ 1.5).

Rows spread over the 64 partitions; each call reads the first 10 of one partition.

Rows are generated with set-based SQL straight into the jobs table (this measures the
read, not the enqueue). The query is `store.queue.fast_pending(partition, after_key=None, limit=10)`,
timed through the store; a raw psycopg `SELECT 1` on the same pool is the floor.

    .venv/bin/python bench/pg_claim.py [--big 1000000] [--calls 300]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from pg_common import fresh_store, line, median_ms, timed

POPULATE = """
INSERT INTO {s}.jobs (id, code, target, lane, key, partition, version, payload, dedupe_key,
  status, attempts, next_run_at, created_at, updated_at, stream_version, last_hash, order_key)
SELECT lpad(to_hex(i), 32, '0'), 'kafka:bench', 'kafka:bench', 'fast', 'k' || (i %% 20000),
  i %% 64, i, '{{"n": 1}}'::jsonb, 'd' || i, 'PENDING', 0, now(), now(), now(), 1, 'h',
  convert_to('k' || (i %% 20000), 'UTF8')
FROM generate_series(1, %(n)s) AS i"""


async def latency(rows: int, calls: int) -> tuple[float, float]:
    async with fresh_store() as store:
        started = time.perf_counter()
        async with store.pool.connection() as conn:
            await conn.execute(POPULATE.format(s=store.s), {"n": rows})
            await conn.execute(f"VACUUM ANALYZE {store.s}.jobs")
        print(f"  generated {rows} rows in {time.perf_counter() - started:.1f}s")

        async def claim(i: int) -> None:
            page = await store.queue.fast_pending(i % 64, after_key=None, limit=10)
            assert len(page) == 10

        async def floor(i: int) -> None:
            async with store.pool.connection() as conn:
                await conn.execute("SELECT 1")

        await timed(50, claim)
        return median_ms(await timed(calls, claim)), median_ms(await timed(calls, floor))


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--big", type=int, default=1_000_000)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    small, small_floor = await latency(args.small, args.calls)
    big, _big_floor = await latency(args.big, args.calls)
    print("(c) fast_pending(partition, after_key=None, limit=10), median per call")
    print(line(f"raw SELECT 1 on the pool ({args.small} rows)", small_floor, "ms"))
    print(line(f"store: fast_pending with {args.small} PENDING rows", small, "ms"))
    print(line(f"store: fast_pending with {args.big} PENDING rows", big, "ms"))
    print(line("ratio big / small (goal <= 1.5)", big / small, "x"))


if __name__ == "__main__":
    asyncio.run(main())
