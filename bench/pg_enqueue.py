"""Enqueue costs on PostgreSQL, each against a raw psycopg baseline of the same run.

(a) one enqueue inside a caller transaction that also inserts a business row, against
    the raw transaction that only inserts the business row (goal <= 1.1x);
(b) a batch of 1,000 enqueues per transaction (goal ≥ 50,000 jobs/s), against raw
    executemany and COPY of the same job rows into a table shaped like `jobs`, and COPY
    of the job rows and their events into tables shaped like `jobs` and `events` (what
    the store writes, without dedupe, positions or NOTIFY). The variants take turns
    batch by batch.

    .venv/bin/python bench/pg_enqueue.py [--single N] [--batches N]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import psycopg
from pg_common import engine, fresh_store, line, median_ms, timed
from psycopg.types.json import Json, Jsonb

from jobledger.domain.jobs import NewJob
from jobledger.storage.port import JobFilter
from jobledger.storage.postgres.encode import job_record
from jobledger.storage.postgres.sql import EVENT_COLUMNS, JOB_COLUMNS
from jobledger.storage.rows import dedupe_key_of, event_to_dict


async def single(n: int) -> None:
    async with fresh_store() as store:
        eng = engine(store)
        s = store.s
        business = f"INSERT INTO {s}.business VALUES (%s, %s)"
        async with store.pool.connection() as conn:
            await conn.execute(f"CREATE TABLE {s}.business (id bigint, note text)")
            for table in ("jobs", "events"):
                await conn.execute(f"CREATE TABLE {s}.raw_{table} (LIKE {s}.{table} INCLUDING ALL)")
        async with eng.transaction() as tx:
            template = await eng.enqueue("kafka:bench", {"n": -1}, key="k0", tx=tx)
        # the engine's own job row and event, written by plain SQL into tables with the
        # same columns and indexes (new ids, stream, position, dedupe key): one statement,
        # no dedupe check, no position search, no NOTIFY
        same_rows = (
            f"WITH e AS (INSERT INTO {s}.raw_events SELECT (jsonb_populate_record(x,"
            " jsonb_build_object('position', %(position)s::bigint, 'stream', %(stream)s::text,"
            f" 'dedupe_key', %(id)s::text))).* FROM {s}.events x WHERE stream = %(from)s::text)"
            f" INSERT INTO {s}.raw_jobs SELECT (jsonb_populate_record(j, jsonb_build_object("
            f"'id', %(id)s::text, 'dedupe_key', %(id)s::text))).* FROM {s}.jobs j"
            " WHERE id = %(template)s::text"
        )

        async def raw(i: int) -> None:
            async with store.pool.connection() as conn, conn.transaction():
                await conn.execute(business, (i, "x"))

        async def raw_round_trip(i: int) -> None:
            async with store.pool.connection() as conn, conn.transaction():
                await conn.execute(business, (i, "x"))
                await conn.execute("SELECT 1")

        copies = iter(range(1, 10**9))

        async def raw_same_rows(i: int) -> None:
            n = next(copies)
            params = {
                "position": n,
                "stream": f"job:raw{n}",
                "id": f"raw{n}",
                "from": f"job:{template.job_id}",
                "template": template.job_id,
            }
            async with store.pool.connection() as conn, conn.transaction():
                await conn.execute(business, (i, "x"))
                await conn.execute(same_rows, params)

        async def with_job(i: int) -> None:
            async with eng.transaction() as tx:
                await tx.native.execute(business, (i, "x"))
                await eng.enqueue("kafka:bench", {"n": i}, key=f"k{i % 100}", tx=tx)

        phases: dict[str, list[float]] = {
            "BEGIN": [],
            "INSERT business": [],
            "engine.enqueue": [],
            "COMMIT": [],
        }

        async def with_job_split(i: int) -> None:
            """The same transaction with explicit BEGIN/COMMIT, each step timed."""
            async with store.pool.connection() as conn:
                steps = iter(phases.values())
                started = time.perf_counter()

                def lap() -> None:
                    nonlocal started
                    now = time.perf_counter()
                    next(steps).append(now - started)
                    started = now

                await conn.execute("BEGIN")
                lap()
                await conn.execute(business, (i, "x"))
                lap()
                await eng.enqueue("kafka:bench", {"n": i}, key=f"k{i % 100}", tx=conn)
                lap()
                await conn.execute("COMMIT")
                lap()

        raw_phases: dict[str, list[float]] = {"BEGIN": [], "INSERT business": [], "COMMIT": []}

        async def raw_split(i: int) -> None:
            async with store.pool.connection() as conn:
                for samples, sql, params in zip(
                    raw_phases.values(),
                    ("BEGIN", business, "COMMIT"),
                    (None, (i, "x"), None),
                    strict=True,
                ):
                    started = time.perf_counter()
                    await conn.execute(sql, params)
                    samples.append(time.perf_counter() - started)

        variants = (raw, raw_round_trip, raw_same_rows, with_job, with_job_split, raw_split)
        for warm in variants:  # warm up every path (prepared statements, caches)
            await timed(200, warm)
        for samples in (*phases.values(), *raw_phases.values()):
            samples.clear()
        base, extra, rows, ours = [], [], [], []
        for _ in range(3):  # interleave so drift hits every side alike
            base += await timed(n // 3, raw)
            extra += await timed(n // 3, raw_round_trip)
            rows += await timed(n // 3, raw_same_rows)
            ours += await timed(n // 3, with_job)
            await timed(n // 3, with_job_split)
            await timed(n // 3, raw_split)
        b, r, o = median_ms(base), median_ms(extra), median_ms(ours)
        print("(a) one enqueue in the caller's transaction, median per transaction")
        print(line("raw: BEGIN; INSERT business; COMMIT", b, "ms"))
        print(line("raw + one bare round trip (SELECT 1)", r, "ms"))
        print(line("raw + the same job row and event by plain SQL", median_ms(rows), "ms"))
        print(line("store: same + engine.enqueue (append_in + NOTIFY)", o, "ms"))
        print(line("ratio raw + round trip / raw", r / b, "x"))
        print(
            line("ratio raw + same rows / raw (the cost of writing them)", median_ms(rows) / b, "x")
        )
        print(line("ratio (goal <= 1.1)", o / b, "x"))
        print("    where the time goes (median per step; raw transaction | with the enqueue)")
        for name, samples in phases.items():
            raw_step = f"{median_ms(raw_phases[name]):.3f}" if name in raw_phases else "-"
            print(f"    {name:<20} {raw_step:>8} | {median_ms(samples):.3f} ms")


async def batches(n: int, size: int = 1000) -> None:
    async with fresh_store() as store:
        eng = engine(store)
        s = store.s
        async with store.pool.connection() as conn:
            for table in ("jobs", "events"):
                await conn.execute(f"CREATE TABLE {s}.raw_{table} (LIKE {s}.{table} INCLUDING ALL)")

        def items(b: int) -> list[NewJob]:
            return [
                NewJob(
                    "kafka:bench", {"n": i}, key=f"k{i % 500}", version=i, dedupe_key=f"b{b}-{i}"
                )
                for i in range(size)
            ]

        async def ours(b: int) -> None:
            async with eng.transaction() as tx:
                flags = await eng.enqueue_many(items(b), tx=tx)
                assert all(f.inserted for f in flags)

        # the same rows the store writes, as the baselines insert them (batch b's ids,
        # streams, dedupe keys and positions made unique)
        await ours(-1)
        rows, _ = await store.admin.list_jobs(
            JobFilter(), offset=0, limit=size, after="", count_limit=0
        )
        events = await store.log.read_log(0, limit=size)
        job_cols = [*JOB_COLUMNS.split(", "), "order_key"]
        event_cols = [*EVENT_COLUMNS.split(", "), "dedupe_key"]

        def raw_jobs(b: int) -> list[tuple[object, ...]]:
            out = []
            for j in rows:
                record = job_record(j)
                record["id"] = f"{b:08d}{record['id'][8:]}"
                record["dedupe_key"] = f"{b}-{record['dedupe_key']}"
                out.append(tuple(_adapt(record[c]) for c in job_cols))
            return out

        def raw_events(b: int) -> list[tuple[object, ...]]:
            out = []
            for k, e in enumerate(events):
                record = event_to_dict(e)
                record["position"] = b * size + k
                record["stream"] = f"job:{b:08d}{e.stream[12:]}"
                record["dedupe_key"] = f"{b}-{dedupe_key_of(e)}"
                out.append(tuple(_adapt(record[c], Json) for c in event_cols))
            return out

        def _adapt(value: object, wrap: type[Json | Jsonb] = Jsonb) -> object:
            return wrap(value) if isinstance(value, dict) else value

        insert = (
            f"INSERT INTO {s}.raw_jobs ({', '.join(job_cols)}) VALUES"
            f" ({', '.join(['%s'] * len(job_cols))})"
        )

        async def raw_many(b: int) -> None:
            data = raw_jobs(b)
            async with store.pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
                await cur.executemany(insert, data)

        async def copy(
            cur: psycopg.AsyncCursor[Any],
            table: str,
            cols: list[str],
            data: list[tuple[object, ...]],
        ) -> None:
            async with cur.copy(f"COPY {s}.{table} ({', '.join(cols)}) FROM STDIN") as cp:
                for r in data:
                    await cp.write_row(r)

        async def raw_copy(b: int) -> None:
            data = raw_jobs(b + 100_000)
            async with store.pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
                await copy(cur, "raw_jobs", job_cols, data)

        async def raw_copy_both(b: int) -> None:
            jobs, log = raw_jobs(b + 200_000), raw_events(b + 200_000)
            async with store.pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
                await copy(cur, "raw_jobs", job_cols, jobs)
                await copy(cur, "raw_events", event_cols, log)

        runs = {
            "executemany": raw_many,
            "copy": raw_copy,
            "copy both": raw_copy_both,
            "store": ours,
        }
        spent = dict.fromkeys(runs, 0.0)
        for b in range(n):  # interleaved, so drift and other load hit every variant alike
            for name, fn in runs.items():
                started = time.perf_counter()
                await fn(b)
                spent[name] += time.perf_counter() - started
        results = {name: n * size / seconds for name, seconds in spent.items()}
        print(f"(b) batches of {size} per transaction, {n} batches")
        print(line("raw executemany of the job rows (pipeline)", results["executemany"], "rows/s"))
        print(line("raw COPY of the job rows", results["copy"], "rows/s"))
        print(line("raw COPY of the job rows and their events", results["copy both"], "jobs/s"))
        print(
            line("store: engine.enqueue_many (events + rows + NOTIFY)", results["store"], "jobs/s")
        )
        print(line("ratio store / raw COPY", results["store"] / results["copy"], "x"))
        print(
            line(
                "ratio store / raw COPY of rows and events",
                results["store"] / results["copy both"],
                "x",
            )
        )
        print(line("ratio store / raw executemany", results["store"] / results["executemany"], "x"))


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--single", type=int, default=3000)
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args()
    await single(args.single)
    await batches(args.batches)


if __name__ == "__main__":
    asyncio.run(main())
