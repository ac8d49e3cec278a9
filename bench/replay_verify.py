"""Auditors' commands at scale: `jobledger verify` and `jobledger replay` on a
log of 1M events, as separate processes, with their events/s and peak RSS.

    .venv/bin/python bench/replay_verify.py --store sqlite --events 1000000
    .venv/bin/python bench/replay_verify.py --store postgres --events 1000000

The log is written by the audit workload of the contract tests (every kind of job
transition, ~4 events per job: tests/contract/projections/test_replay_workload.py) through the
store's batch append (`enqueue_many`, then `Writes.apply` in batches of 5,000 changes),
in slices of 25,000 jobs. The commands run after the first slice (~100k events), at
1M events and after the last, so the peak RSS of the small and the large log sit side
by side (GNU `time`, which must be installed): bounded memory shows as the same figure.
`--copies` (PostgreSQL) writes the log past its first slice as copies of that slice
(`bench/log_copies.py`: new job streams with their own hash chains, and the open jobs'
rows), so both commands pass over it and 10M events take minutes to write:

    .venv/bin/python bench/replay_verify.py --store postgres --private --copies --events 10000000

Each command's wall time and CPU time (user + system, from GNU time) give events/s and
events per CPU-second: on a shared machine the CPU figure is the one that does not
depend on what else runs. Same-run baseline: the bare read of every event row in
position order by the raw driver (sqlite3 / psycopg, a server-side cursor), no
decoding, with its wall and CPU rates; each command's rates are also given as a ratio
to the raw read's. Replay reads the log in (stream, version) order: the raw read in that
order (the unique index) is printed too. The load average is printed before each command.

`--baseline-src DIR` runs each command a second time on the same log with another
checkout's `src` first on PYTHONPATH (e.g. the code before a change: `git archive <rev>
src | tar -x -C DIR/..`), so a before/after pair is measured in the same run.

SQLite: a fresh file in a temporary folder. PostgreSQL: the `jobledger` schema of the
database `jobledger_replay_bench` (created if missing, the schema dropped first and
after), since the CLI opens the default schema of the URL's database; on the machine's
server, or with `--private` on a cluster of its own (`long_log.private_database`).
Plain script, not a test; docs/performance.md records the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from jobledger.core.clock import FakeClock
from jobledger.storage.port import Store
from jobledger.storage.postgres import PostgresStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.contract.projections.test_replay_workload import generate

CLI = str(Path(sys.executable).with_name("jobledger"))
TIME = "/usr/bin/time"  # GNU time: the peak RSS of the command alone
PG_SERVER = os.environ.get("JOBLEDGER_BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
PG_DATABASE = "jobledger_replay_bench"
SLICE = 25_000  # jobs per generate() call (~100k events)


def run_command(url: str, *args: str, src: str | None = None) -> dict[str, Any]:
    """Run one `jobledger` command; its wall time, CPU time (user + system), peak RSS
    (MiB) and output.

    The peak RSS comes from GNU time (`/usr/bin/time -f %M`), a small C program that
    forks the command: `wait4` on a child forked from this bench would also count the
    pages of the bench itself, which the child holds until it execs.
    """
    with tempfile.TemporaryDirectory() as name:
        rss_file = Path(name) / "rss"
        started = time.perf_counter()
        env = {**os.environ, "PYTHONPATH": src} if src else None
        done = subprocess.run(
            [TIME, "-f", "%M %U %S", "-o", str(rss_file), CLI, "--store", url, *args],
            capture_output=True,
            text=True,
            check=False,
            env=env,
        )
        seconds = time.perf_counter() - started
        rss_kib, user, system = rss_file.read_text().split()[-3:]
    return {
        "seconds": seconds,
        "cpu": float(user) + float(system),
        "rss_mib": int(rss_kib) / 1024,
        "code": done.returncode,
        "out": done.stdout,
        "err": done.stderr,
    }


def measured(
    url: str, command: str, events: int, raw: tuple[float, float], src: str | None = None
) -> str:
    """One command's line: wall and CPU rates, each against the raw read's (same run);
    `src`: the code under test is that checkout's (the baseline)."""
    load = os.getloadavg()[0]
    result = run_command(url, command, src=src)
    first = result["out"].splitlines()[0] if result["out"] else ""
    match = re.search(r"(verified|replayed) (\d+) events", first)
    seen = int(match.group(2)) if match else -1
    ok = result["code"] == 0 and seen == events
    rate, cpu_rate = events / result["seconds"], events / result["cpu"]
    label = f"{command} (baseline)" if src else command
    return (
        f"  {label:<18} {result['seconds']:7.2f} s {rate:9,.0f} events/s ({rate / raw[0]:.2f}x raw)"
        f"  CPU {result['cpu']:6.2f} s {cpu_rate:9,.0f} events/CPU-s ({cpu_rate / raw[1]:.2f}x raw)"
        f"  peak RSS {result['rss_mib']:6.1f} MiB  load {load:.1f}  exit {result['code']}"
        f"{'' if ok else '  FAILED: ' + (first or result['err'].strip()[-300:])}"
    )


#: the raw reads' orders: the log's (verify) and the unique index's (replay)
ORDERS = {"position": "position", "stream": "stream, version"}


def raw_read_sqlite(path: str, order: str = "position") -> tuple[int, float, float]:
    import sqlite3

    started, cpu = time.perf_counter(), time.process_time()
    conn = sqlite3.connect(path)
    count = 0
    cur = conn.execute(f"SELECT * FROM events ORDER BY {ORDERS[order]}")
    while rows := cur.fetchmany(5000):
        count += len(rows)
    conn.close()
    return count, time.perf_counter() - started, time.process_time() - cpu


def raw_read_postgres(dsn: str, order: str = "position") -> tuple[int, float, float]:
    import psycopg

    started, cpu = time.perf_counter(), time.process_time()
    count = 0
    from psycopg.types.string import TextLoader

    with psycopg.connect(dsn) as conn, conn.cursor(name="raw") as cur:
        cur.adapters.register_loader("json", TextLoader)  # no decoding: the JSON as text
        cur.itersize = 5000
        cur.execute(f"SELECT * FROM jobledger.events ORDER BY {ORDERS[order]}")
        while rows := cur.fetchmany(5000):
            count += len(rows)
    return count, time.perf_counter() - started, time.process_time() - cpu


async def pg_database() -> str:
    import psycopg
    from psycopg.conninfo import make_conninfo

    async with await psycopg.AsyncConnection.connect(PG_SERVER, autocommit=True) as admin:
        cur = await admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (PG_DATABASE,))
        if not await cur.fetchone():
            await admin.execute(f'CREATE DATABASE "{PG_DATABASE}"')
    dsn = make_conninfo(PG_SERVER, dbname=PG_DATABASE)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("DROP SCHEMA IF EXISTS jobledger CASCADE")
    return dsn


async def main() -> int:
    if "--private" not in sys.argv:
        return await measure()
    from contextlib import AsyncExitStack

    from long_log import private_database

    global PG_SERVER
    async with AsyncExitStack() as stack:
        PG_SERVER = await stack.enter_async_context(private_database())
        return await measure()


async def measure() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--baseline-src", help="also run each command with this src first")
    parser.add_argument(
        "--copies",
        action="store_true",
        help="PostgreSQL: past the first slice, copies of it (bench/log_copies.py)",
    )
    parser.add_argument(
        "--private", action="store_true", help="PostgreSQL: a private cluster for the run"
    )
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    folder = tempfile.TemporaryDirectory(prefix="jl-replay-bench-")
    store: Store
    if args.store == "sqlite":
        from jobledger.storage.sqlite import SqliteStore

        path = str(Path(folder.name) / "ledger.db")
        url = f"sqlite:///{path}"
        store = SqliteStore(path)
    else:
        from urllib.parse import urlsplit

        dsn = await pg_database()
        url = urlsplit(PG_SERVER)._replace(path=f"/{PG_DATABASE}").geturl()
        store = PostgresStore(dsn)
    await store.open()
    clock = FakeClock()
    events = 0
    first = 0
    checkpoints = sorted({min(args.events, n) for n in (100_000, 1_000_000, args.events)})
    generated_s = 0.0
    copier: Any = None
    copies = 0
    try:
        for target in checkpoints:
            while events < target:
                started = time.perf_counter()
                if copier is not None:
                    copies += 1
                    events += (await copier.write(copies, rows=True))[0]
                    generated_s += time.perf_counter() - started
                    continue
                jobs = max(1, min(SLICE, (target - events) // 4))
                workload = await generate(store, clock, jobs_count=jobs, first=first)
                generated_s += time.perf_counter() - started
                if args.copies and events == 0:
                    from log_copies import Copier

                    assert isinstance(store, PostgresStore)
                    copier = Copier(store, await store.log.read_log(0, limit=workload.events))
                first += jobs
                events += workload.events
            how = f"{copies} copies of the first slice" if copies else "the store's batch append"
            print(
                f"log of {events:,} events ({first:,} jobs written, {how}), at"
                f" {events / generated_s:,.0f} events/s"
            )
            raws = {}
            for order in ORDERS:
                if args.store == "sqlite":
                    raw_count, raw_s, raw_cpu = raw_read_sqlite(path, order)
                else:
                    raw_count, raw_s, raw_cpu = raw_read_postgres(dsn, order)
                raws[order] = (raw_count / raw_s, raw_count / raw_cpu)
                print(
                    f"  raw read of every event row by {ORDERS[order]} ({args.store} driver,"
                    f" same run): {raws[order][0]:,.0f} rows/s, {raws[order][1]:,.0f} rows/CPU-s"
                    f" (this process's CPU only, not the server's)"
                )
            raw = raws["position"]  # the ratios' base: the log's own order
            for command in ("verify", "replay"):
                print(measured(url, command, events, raw), flush=True)
                if args.baseline_src:
                    print(measured(url, command, events, raw, args.baseline_src), flush=True)
    finally:
        await store.close()
        if args.store == "postgres":
            import psycopg

            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("DROP SCHEMA IF EXISTS jobledger CASCADE")
        folder.cleanup()
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
