"""What never-skipping log positions cost: xid-ordered positions vs serialised appends.

The store orders the log by (writing transaction id, ordinal) and readers stop below
the oldest running transaction, so writers never wait for each other. The alternative
is a commit-ordered sequence, which needs every appending transaction to hold one
global lock until it commits. Both are run here with the same concurrent writers
(each: BEGIN; business row; enqueue; COMMIT), the alternative emulated by taking
`pg_advisory_xact_lock` first.

    .venv/bin/python bench/pg_log.py [--writers 8] [--each 150]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from pg_common import engine, fresh_store, line


async def run(writers: int, each: int, serialise: bool) -> float:
    async with fresh_store(pool_max=writers + 2) as store:
        eng = engine(store)
        s = store.s
        async with store.pool.connection() as conn:
            await conn.execute(f"CREATE TABLE {s}.business (id bigint)")

        async def writer(w: int) -> None:
            for i in range(each):
                async with eng.transaction() as tx:
                    if serialise:
                        await tx.native.execute("SELECT pg_advisory_xact_lock(4242)")
                    await tx.native.execute(f"INSERT INTO {s}.business VALUES (%s)", (i,))
                    await eng.enqueue("kafka:bench", {"w": w, "i": i}, tx=tx)

        await writer(-1)
        started = time.perf_counter()
        await asyncio.gather(*(writer(w) for w in range(writers)))
        rate = writers * each / (time.perf_counter() - started)
        read = 0
        after = 0
        started = time.perf_counter()
        while page := await store.log.read_log(after, limit=500):
            read += len(page)
            after = page[-1].position or 0
        assert read == (writers + 1) * each
        print(f"  read the log back in {time.perf_counter() - started:.2f}s ({read} events)")
        return rate


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--each", type=int, default=150)
    args = parser.parse_args()
    free = await run(args.writers, args.each, serialise=False)
    locked = await run(args.writers, args.each, serialise=True)
    print(f"(e) {args.writers} concurrent writers, one enqueue per transaction")
    print(line("xid-ordered positions (the store)", free, "tx/s"))
    print(line("serialised appends (global advisory lock)", locked, "tx/s"))
    print(line("ratio xid / serialised", free / locked, "x"))


if __name__ == "__main__":
    asyncio.run(main())
