"""How pods share the 64 partitions: the time to an even share after a pod joins, dies
or stops, and the partitions (and open jobs) that moved, with default settings.

    .venv/bin/python bench/pod_share.py [--pods 4] [--backlog 64000]

One PostgreSQL schema holds `--backlog` jobs due in a day (they stay PENDING, so the
jobs that change owner with a partition can be counted). Worker processes (a `Runtime`
with `Settings()` each, as `jobledger worker` runs) join one at a time; after each join
the bench polls the lease rows every 50 ms until every live pod holds ⌊64/n⌋ or ⌈64/n⌉
partitions and no partition is unheld, and prints the time that took and how many
partitions and jobs changed owner. Then the last pod is killed (SIGKILL: its leases
run out on their own) and the one before it is stopped (SIGTERM: it releases them), each
followed by the same wait. The figures follow from `heartbeat_s` and
`partition_lease_s` (docs/reliability.md); the bench shows them end to end. Plain
script, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

import psycopg
from pg_common import fresh_store

from jobledger.config.settings import Settings
from jobledger.domain.jobs import NewJob
from jobledger.engine import Engine

TARGET = "bench:later"
POD = """
import asyncio, sys
from jobledger.config.settings import Settings
from jobledger.engine import Engine
from jobledger.reactors.runtime import Runtime
from jobledger.storage.postgres import PostgresStore

async def main(dsn, schema, pod):
    store = PostgresStore(dsn, schema=schema, pool_max=4)
    await store.open()
    engine = Engine(store, settings=Settings())
    engine.targets.register(TARGET, "fast", lambda job: None)
    await Runtime(engine, pod_id=pod).run_forever()
    await store.close()

TARGET = "bench:later"
asyncio.run(main(*sys.argv[1:]))
"""


async def owners(dsn: str, schema: str) -> dict[int, str | None]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            f'SELECT partition, CASE WHEN lease_until > now() THEN owner END FROM "{schema}".partitions'
        )
        return {int(p): o for p, o in await cur.fetchall()}


def even(held: dict[int, str | None], pods: list[str]) -> bool:
    if len(held) < 64 or any(owner not in pods for owner in held.values()):
        return False
    counts = [sum(1 for o in held.values() if o == pod) for pod in pods]
    return max(counts) - min(counts) <= 1 and min(counts) >= 64 // len(pods)


async def wait_even(dsn: str, schema: str, pods: list[str], before: dict[int, str | None]) -> str:
    began = time.perf_counter()
    while True:
        held = await owners(dsn, schema)
        if even(held, pods):
            moved = [p for p in held if held[p] != before.get(p)]
            return f"{time.perf_counter() - began:6.1f} s, {len(moved)} partitions moved"
        if time.perf_counter() - began > 300:
            return "not even after 300 s"
        await asyncio.sleep(0.05)


async def jobs_in(dsn: str, schema: str, partitions: list[int]) -> int:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            f'SELECT count(*) FROM "{schema}".jobs WHERE partition = ANY(%s)', (partitions,)
        )
        row = await cur.fetchone()
        return int(row[0]) if row else 0


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=4)
    parser.add_argument("--backlog", type=int, default=64_000)
    args = parser.parse_args()
    settings = Settings()
    print(
        f"heartbeat_s {settings.heartbeat_s}, partition_lease_s {settings.partition_lease_s};"
        f" load average {os.getloadavg()}"
    )
    async with fresh_store() as store:
        engine = Engine(store, settings=settings)
        engine.targets.register(TARGET, "fast", lambda job: None)
        later = engine.clock.now() + timedelta(days=1)
        for start in range(0, args.backlog, 1000):
            async with engine.transaction() as tx:
                await engine.enqueue_many(
                    [
                        NewJob(TARGET, None, key=f"k{i}", run_at=later)
                        for i in range(start, start + 1000)
                    ],
                    tx=tx,
                )
        procs: dict[str, subprocess.Popen[bytes]] = {}
        live: list[str] = []
        try:
            for n in range(args.pods):
                name = f"pod-{n}"
                before = await owners(store.dsn, store.schema)
                procs[name] = subprocess.Popen(
                    [sys.executable, "-c", POD, store.dsn, store.schema, name],
                    stdin=subprocess.DEVNULL,
                )
                live.append(name)
                result = await wait_even(store.dsn, store.schema, live, before)
                after = await owners(store.dsn, store.schema)
                moved = [p for p in after if after[p] != before.get(p) and before.get(p)]
                jobs = await jobs_in(store.dsn, store.schema, moved)
                print(
                    f"{name} joins ({len(live)} pods): even share after {result}; {jobs} open jobs changed pods"
                )
            for how, sig in (("killed", signal.SIGKILL), ("stopped", signal.SIGTERM)):
                if len(live) < 2:
                    break
                name = live.pop()
                before = await owners(store.dsn, store.schema)
                procs[name].send_signal(sig)
                result = await wait_even(store.dsn, store.schema, live, before)
                after = await owners(store.dsn, store.schema)
                moved = [p for p in after if after[p] != before.get(p)]
                jobs = await jobs_in(store.dsn, store.schema, moved)
                print(
                    f"{name} {how} ({len(live)} pods left): even share after {result}; {jobs} open jobs changed pods"
                )
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in procs.values():
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    asyncio.run(main())
