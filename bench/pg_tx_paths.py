"""One enqueue with a business row, by the way the transaction is opened, same run.

The same `BEGIN; INSERT business row; engine.enqueue; COMMIT` on four paths, taking
turns in blocks of 100 (`--rounds` blocks each, after 100 warm-up calls per path):
the caller's own psycopg connection (as in bench/peer_procrastinate.py's (3)), the same
in autocommit mode with `conn.transaction()`, a connection checked out of the store's
pool, and `engine.transaction()` (the pool checkout plus the `Transaction` wrapper).
`--no-flush` runs every session with `synchronous_commit=off`. Each round also runs
the caller's-connection path with a listener in this process: the store's feed
subscribed and read by a task (what a pod's runtime does), and a bare psycopg
connection LISTENing on the same channel and read by a task (what a Procrastinate
worker's listener does).

    .venv/bin/python bench/pg_tx_paths.py [--rounds 6] [--no-flush]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import psycopg
from pg_common import bench_dsn, engine, timed
from psycopg.conninfo import make_conninfo

from jobledger.core.tasks import cancel_and_wait
from jobledger.storage.feed import Subscription
from jobledger.storage.postgres import PostgresStore

Conn = psycopg.AsyncConnection[object]


async def paths(
    store: PostgresStore, own: Conn, own_ac: Conn
) -> dict[str, Callable[[int], Awaitable[None]]]:
    eng = engine(store)
    s = store.s
    insert = f"INSERT INTO {s}.business VALUES (%s, %s)"
    async with store.pool.connection() as conn:
        await conn.execute(f"CREATE TABLE {s}.business (id bigint, note text)")
    count = iter(range(10**9))

    async def on(conn: Conn, i: int) -> None:
        async with conn.transaction():
            await conn.execute(insert, (i, "x"))
            await eng.enqueue("kafka:bench", {"i": i}, tx=conn, key=f"k{i}")

    async def caller(_: int) -> None:
        await on(own, next(count))

    async def caller_autocommit(_: int) -> None:
        await on(own_ac, next(count))

    async def pool(_: int) -> None:
        async with store.pool.connection() as conn:
            await on(conn, next(count))

    async def engine_tx(_: int) -> None:
        i = next(count)
        async with eng.transaction() as tx:
            await tx.native.execute(insert, (i, "x"))
            await eng.enqueue("kafka:bench", {"i": i}, tx=tx, key=f"k{i}")

    return {
        "caller's connection": caller,
        "caller's connection, store feed subscribed": Listening(store, caller, raw=False),
        "caller's connection, bare LISTEN": Listening(store, caller, raw=True),
        "caller's autocommit connection": caller_autocommit,
        "store's pool connection": pool,
        "engine.transaction()": engine_tx,
    }


class Listening:
    """A path whose block of calls runs with a listener in this process (started before
    the block, stopped after it: outside the timed calls)."""

    def __init__(
        self, store: PostgresStore, step: Callable[[int], Awaitable[None]], raw: bool
    ) -> None:
        self.store, self.step, self.raw = store, step, raw

    async def __call__(self, i: int) -> None:
        await self.step(i)

    async def block(self, n: int) -> list[float]:
        conn: Conn | None = None
        if self.raw:
            conn = await psycopg.AsyncConnection.connect(self.store.dsn, autocommit=True)
            await conn.execute(f'LISTEN "{self.store.sql.channel}"')
            source: AsyncIterator[object] = conn.notifies()
        else:
            source = await self.store.feed().open()

        async def read() -> None:
            async for _ in source:
                pass

        reader = asyncio.create_task(read())
        try:
            return await timed(n, self)
        finally:
            await cancel_and_wait(reader)
            if conn is not None:
                await conn.close()
            elif isinstance(source, Subscription):
                await source.aclose()


async def block(step: Callable[[int], Awaitable[None]], n: int) -> list[float]:
    if isinstance(step, Listening):
        return await step.block(n)
    return await timed(n, step)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--no-flush", action="store_true")
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    dsn = await bench_dsn()
    if args.no_flush:  # every session: the store's pool and the caller's connections
        dsn = make_conninfo(dsn, options="-c synchronous_commit=off")
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    store = PostgresStore(dsn, schema=schema)
    await store.open()
    own = await psycopg.AsyncConnection.connect(dsn)
    own_ac = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    try:
        found = await paths(store, own, own_ac)
        samples: dict[str, list[float]] = {name: [] for name in found}
        for step in found.values():
            await block(step, 100)
        for _ in range(args.rounds):
            for name, step in found.items():
                samples[name] += await block(step, 100)
    finally:
        await own.close()
        await own_ac.close()
        await store.close()
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    first = statistics.median(samples["caller's connection"])
    for name, got in samples.items():
        ms = statistics.median(got) * 1000
        print(f"  {name:44s} {ms:7.3f} ms  ({statistics.median(got) / first:.2f}x the caller's)")


if __name__ == "__main__":
    asyncio.run(main())
