"""Cost as the work grows: a drain and single enqueues at 20k, 200k and 1M pending jobs.

    .venv/bin/python bench/scale.py --store postgres
    .venv/bin/python bench/scale.py --store sqlite --rounds 5
    .venv/bin/python bench/scale.py --store postgres --sizes 20000,1000000 --lanes fast-alo \\
        --rounds 1 --diagnose           # where the time goes: see below

For each lane (`fast-alo`: fast lane at-least-once, `fast-amo`: at-most-once, `long`:
the long lane) one store per size is filled side by side (a PostgreSQL schema or a
SQLite file each): `size` no-op jobs of one target, distinct keys (every partition),
enqueued 1,000 per transaction, then `VACUUM ANALYZE` (PostgreSQL) or `ANALYZE`
(SQLite). Then `--rounds` rounds measure every size in turn, in rising order in even
rounds and falling order in odd ones (A B C C B A ...: the machine's drift hits every
size alike):

1. single enqueues: `--enqueues` transactions of one business row and one job each
   (`engine.enqueue(..., tx=...)` on the transaction's own connection), timed one by
   one: jobs/s is their count over their total time;
2. the drain: a `Runtime` with default settings is started and timed until its handler
   has run `--drain` jobs (`--long-drain` on the long lane), the start included; jobs/s,
   the time to the first run, this process's CPU time per job (the pod) and, on
   PostgreSQL, the CPU time of the pod's own server backends per job;
3. not timed: the backlog topped up to its size with new keys and analyzed again.

Each round prints every figure's ratio to the smallest size **of the same round**; the
summary gives, per lane and size, the median of the rounds and the median, spread and
count of the per-round ratios, with the load average at the start and end.

`--diagnose` (PostgreSQL) runs on a private cluster started for the run (initdb on a
free loopback port; the machine's settings that change the figures copied:
shared_buffers, fsync, synchronous_commit, full_page_writes, autovacuum, jit, ...) with
`pg_stat_statements` and `track_io_timing`, and prints for the enqueues and the drain
each statement's calls, time, buffers hit / read / dirtied / written, WAL records, full
page images and bytes per job; `EXPLAIN (ANALYZE, BUFFERS)` of the lanes' reads on the
loaded backlog; and a cProfile of the pod's drain (the ten functions with the most own
time; `.pstats` files in `--profile-dir`). `--explain-ms N` also logs the plan of every
statement slower than N ms (auto_explain) and keeps the server log.

Plain script, not a test; performance is measured here, never in timed tests.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import ctypes
import io
import os
import pstats
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import psycopg
from drain import backend_ticks
from pg_common import fresh_store as pg_fresh_store
from psycopg.conninfo import make_conninfo

from jobledger.config.settings import Settings
from jobledger.domain.jobs import Job, NewJob
from jobledger.engine import Engine
from jobledger.reactors.runtime import Runtime
from jobledger.storage.port import Store

ROOT = Path(__file__).resolve().parents[1]
SERVER = os.environ.get("JOBLEDGER_BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
DATABASE = "jobledger_scale_bench"
BENCH_APP = "jobledger_drain_bench"  # drain.ServerCpu finds the pod's backends by it
TARGET = "bench:noop"
LANES = {  # name: (lane, delivery mode)
    "fast-alo": ("fast", "at_least_once"),
    "fast-amo": ("fast", "at_most_once"),
    "long": ("long", "at_least_once"),
}
#: the machine's settings a private cluster copies (those that change the figures)
COPIED_SETTINGS = (
    "shared_buffers",
    "fsync",
    "synchronous_commit",
    "full_page_writes",
    "autovacuum",
    "jit",
    "max_wal_size",
    "checkpoint_timeout",
    "effective_cache_size",
    "random_page_cost",
    "work_mem",
)


@dataclass
class Point:
    lane: str
    size: int
    drain: float  # jobs/s
    pod_us: float  # this process's CPU µs per drained job
    server_us: float  # the pod's server backends' CPU µs per drained job (PostgreSQL)
    enqueue: float  # single enqueues per second
    enqueue_p50_ms: float
    enqueue_us: float  # this process's CPU µs per single enqueue
    first_ms: float  # from the start to the first run
    notes: list[str] = field(default_factory=list)


# --- the stores -------------------------------------------------------------------------


class Server:
    """Where the PostgreSQL points run: the machine's server, or a private cluster."""

    def __init__(self, dsn: str, *, private: Any = None) -> None:
        self.dsn = dsn
        self.private = private

    async def database(self) -> str:
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as admin:
            cur = await admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,))
            if not await cur.fetchone():
                await admin.execute(f'CREATE DATABASE "{DATABASE}"')
        dsn = make_conninfo(self.dsn, dbname=DATABASE)
        if self.private is not None:
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        return dsn


@asynccontextmanager
async def private_server(
    explain_ms: float | None, log_to: str | None, overrides: list[str], *, statements: bool = True
) -> AsyncIterator[Server]:
    """A private cluster with the machine's settings that matter, plus pg_stat_statements
    (`statements`: else without the preloaded libraries, as the machine's server runs)."""
    sys.path.insert(0, str(ROOT))
    from tests.private_pg import PrivateCluster, pg_bin

    bin_dir = pg_bin()
    if bin_dir is None:
        raise SystemExit("--diagnose needs PostgreSQL's server binaries (initdb, pg_ctl)")
    async with await psycopg.AsyncConnection.connect(SERVER, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT name, setting, unit FROM pg_settings WHERE name = ANY(%s)",
            (list(COPIED_SETTINGS),),
        )
        copied = await cur.fetchall()
    cluster = PrivateCluster(bin_dir)
    try:
        await asyncio.to_thread(cluster.init)
        with (cluster.data / "postgresql.conf").open("a") as conf:
            for name, setting, unit in copied:
                conf.write(f"{name} = '{conf_value(setting, unit)}'\n")
            if statements:
                conf.write(
                    "shared_preload_libraries = 'pg_stat_statements, auto_explain'\n"
                    "pg_stat_statements.track = 'all'\npg_stat_statements.track_planning = on\n"
                    "track_io_timing = on\n"
                )
            for line in overrides:  # --set name=value, after the copied settings
                name, _, value = line.partition("=")
                conf.write(f"{name.strip()} = '{value.strip()}'\n")
            if explain_ms is not None:  # the plans of slow statements, in the server log
                conf.write(
                    f"auto_explain.log_min_duration = '{explain_ms}ms'\n"
                    "auto_explain.log_analyze = on\nauto_explain.log_buffers = on\n"
                    "auto_explain.log_timing = off\nauto_explain.log_wal = on\n"
                )
        await asyncio.to_thread(cluster.start)
        print(
            f"private cluster on port {cluster.port}: "
            + ", ".join([*(f"{n}={s}" for n, s, _ in copied), *overrides])
        )
        yield Server(cluster.dsn, private=cluster)
        if explain_ms is not None:
            kept = Path(log_to or ".") / "scale-server.log"
            shutil.copy(cluster.log, kept)
            print(f"the server log, with the plans: {kept}")
    finally:
        await asyncio.to_thread(cluster.remove)


def conf_value(setting: str, unit: str | None) -> str:
    """A pg_settings value as postgresql.conf takes it ("8kB" counts blocks of 8 kB)."""
    if unit == "8kB":
        return f"{int(setting) * 8}kB"
    return f"{setting}{unit or ''}"


@asynccontextmanager
async def fresh_store(
    kind: str, server: Server, tmp: Path, template: Path | None = None
) -> AsyncIterator[Store]:
    """A store of its own; on SQLite a copy of `template` (a filled file) if given."""
    if kind == "postgres":
        database = await server.database()
        async with pg_fresh_store(BENCH_APP, database=database, pool_max=10) as pg:
            yield pg
        return
    from jobledger.storage.sqlite import SqliteStore

    path = tmp / f"scale-{uuid.uuid4().hex[:6]}.db"
    if template is not None:
        shutil.copyfile(template, path)
    sqlite_store = SqliteStore(str(path))
    await sqlite_store.open()
    try:
        yield sqlite_store
    finally:
        await sqlite_store.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


# --- one point ------------------------------------------------------------------------


async def load(engine: Engine, size: int, prefix: str, first: int = 0) -> None:
    """`size` jobs of TARGET, 1,000 per transaction, distinct keys (every partition):
    `prefix` and a number from `first` on."""
    for start in range(first, first + size, 1000):
        async with engine.transaction() as tx:
            await engine.enqueue_many(
                [
                    NewJob(TARGET, None, key=f"{prefix}{i}")
                    for i in range(start, min(start + 1000, first + size))
                ],
                tx=tx,
            )


async def analyze(store: Store) -> None:
    if store.name == "postgres":
        from jobledger.storage.postgres import PostgresStore

        assert isinstance(store, PostgresStore)
        async with await psycopg.AsyncConnection.connect(store.dsn, autocommit=True) as conn:
            await conn.execute(f"VACUUM ANALYZE {store.s}.jobs")
            await conn.execute(f"VACUUM ANALYZE {store.s}.events")
        return
    from jobledger.storage.sqlite import SqliteStore

    assert isinstance(store, SqliteStore)
    db = sqlite3.connect(store.path)
    db.execute("ANALYZE")
    db.close()


async def business_table(store: Store) -> None:
    if store.name == "postgres":
        from jobledger.storage.postgres import PostgresStore

        assert isinstance(store, PostgresStore)
        async with await psycopg.AsyncConnection.connect(store.dsn, autocommit=True) as conn:
            await conn.execute(f"CREATE TABLE {store.s}.business (id bigint, note text)")
        return
    async with store.writes.transaction() as tx:
        tx.native.execute("CREATE TABLE business (id INTEGER, note TEXT)")


async def single_enqueues(engine: Engine, store: Store, count: int, prefix: str) -> list[float]:
    """`count` transactions of one business row and one job; seconds each."""
    out = []
    if store.name == "postgres":
        from jobledger.storage.postgres import PostgresStore

        assert isinstance(store, PostgresStore)
        conn = await psycopg.AsyncConnection.connect(store.dsn)
        insert = f"INSERT INTO {store.s}.business VALUES (%s, 'x')"
        try:
            for i in range(count):
                began = time.perf_counter()
                async with conn.transaction():
                    await conn.execute(insert, (i,))
                    await engine.enqueue(TARGET, {"i": i}, tx=conn, key=f"{prefix}{i}")
                out.append(time.perf_counter() - began)
        finally:
            await conn.close()
        return out
    for i in range(count):
        began = time.perf_counter()
        async with engine.transaction() as tx:
            tx.native.execute("INSERT INTO business VALUES (?, 'x')", (i,))
            await engine.enqueue(TARGET, {"i": i}, tx=tx, key=f"{prefix}{i}")
        out.append(time.perf_counter() - began)
    return out


class ServerCpu:
    """CPU time of the pod's own server backends (`BENCH_APP`) over a stretch of time,
    read from /proc (the server runs on this machine)."""

    def __init__(self, server: Server) -> None:
        self.server = server

    async def pids(self) -> list[int]:
        async with await psycopg.AsyncConnection.connect(self.server.dsn, autocommit=True) as c:
            cur = await c.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (BENCH_APP,)
            )
            return [int(row[0]) for row in await cur.fetchall()]

    async def start(self) -> None:
        self.before = backend_ticks(await self.pids())

    async def seconds(self) -> float:
        now = backend_ticks(await self.pids())
        used = sum(t - self.before.get(pid, 0) for pid, t in now.items())
        return used / os.sysconf("SC_CLK_TCK")


class Counter:
    """The no-op handler: counts its runs and says when `goal` is reached."""

    def __init__(self) -> None:
        self.done = 0
        self.goal = 0
        self.reached = asyncio.Event()
        self.first = 0.0  # perf_counter of the first run

    async def __call__(self, job: Job) -> None:
        if not self.done:
            self.first = time.perf_counter()
        self.done += 1
        if self.done == self.goal:
            self.reached.set()


async def timed_drain(
    engine: Engine,
    store: Store,
    server_: Server,
    counter: Counter,
    jobs: int,
    profile: cProfile.Profile | None,
) -> tuple[float, float, float, float]:
    """(seconds, pod CPU seconds, server CPU seconds) until the handler ran `jobs` times,
    and the seconds until it first ran."""
    counter.done, counter.goal, counter.reached = 0, jobs, asyncio.Event()
    runtime = Runtime(engine, pod_id="scale")
    server = ServerCpu(server_)
    if store.name == "postgres":
        await server.start()
    if profile is not None:
        profile.enable()
    began, cpu = time.perf_counter(), time.process_time()
    await runtime.start()
    await counter.reached.wait()
    elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
    if profile is not None:
        profile.disable()
    server_s = await server.seconds() if store.name == "postgres" else 0.0
    await runtime.stop()
    return elapsed, cpu, server_s, counter.first - began


@dataclass
class Backlog:
    """One lane's store at one size, kept across the rounds."""

    store: Store
    engine: Engine
    counter: Counter
    size: int


async def open_backlog(
    stack: AsyncExitStack,
    kind: str,
    server: Server,
    tmp: Path,
    lane: str,
    size: int,
    template: Path | None = None,
) -> Backlog:
    """The lane's store at `size`: filled here, or (SQLite) a copy of a filled file."""
    lane_name, mode = LANES[lane]
    store = await stack.enter_async_context(fresh_store(kind, server, tmp, template))
    engine = Engine(store, settings=Settings())
    counter = Counter()
    engine.targets.register(TARGET, lane_name, counter, delivery_mode=mode)
    if template is None:
        await load(engine, size, "k")
        await analyze(store)
    await business_table(store)
    return Backlog(store, engine, counter, size)


def template_path(folder: Path, lane: str, size: int) -> Path:
    """A filled SQLite file: by schema version, lane (not delivery mode: the rows are the
    same) and size."""
    from jobledger.storage.sqlite.schema import LATEST

    return folder / f"scale-v{LATEST}-{LANES[lane][0]}-{size}.db"


async def fill_templates(folder: Path, lane: str, sizes: list[int]) -> None:
    """The filled SQLite files of `lane` at `sizes` in `folder`, each the very file
    `open_backlog` would fill (keys k0, k1, ... one target, 1,000 per transaction, then
    ANALYZE), filled once: one file grown from size to size and copied at each, its WAL
    checkpointed into it first. Files already there are kept."""
    from jobledger.storage.sqlite import SqliteStore

    if all(template_path(folder, lane, size).exists() for size in sizes):
        return
    folder.mkdir(parents=True, exist_ok=True)
    work = folder / f"filling-{uuid.uuid4().hex[:6]}.db"
    store = SqliteStore(str(work))
    await store.open()
    try:
        engine = Engine(store, settings=Settings())
        engine.targets.register(TARGET, LANES[lane][0], Counter())
        filled = 0
        for size in sorted(sizes):
            await load(engine, size - filled, "k", first=filled)
            filled = size
            await analyze(store)
            await store.connections.w.run(
                lambda: store.connections.w.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            )
            shutil.copyfile(work, template_path(folder, lane, size))
    finally:
        await store.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{work}{suffix}").unlink(missing_ok=True)


async def point(backlog: Backlog, server: Server, lane: str, round_: int, args: Any) -> Point:
    """Single enqueues, then the timed drain; then the backlog topped up to its size
    again (new keys, not timed) and analyzed for the next round."""
    store, engine, counter = backlog.store, backlog.engine, backlog.counter
    kind = store.name
    lane_name, _ = LANES[lane]
    notes: list[str] = []
    drain = args.long_drain if lane_name == "long" else args.drain
    pages = SqlitePages(store) if args.diagnose and kind == "sqlite" else None
    if args.diagnose and kind == "postgres":
        if round_ == 0:
            notes += await explain_reads(store, lane_name)
        await reset_statements(server)
    if pages is not None:
        if round_ == 0:
            notes += sqlite_plans(store)
        pages.start()
    enqueue_cpu = time.process_time()
    samples = await single_enqueues(engine, store, args.enqueues, f"s{round_}-")
    enqueue_cpu = time.process_time() - enqueue_cpu
    if args.diagnose and kind == "postgres":
        notes += await statements(server, "enqueues", args.enqueues)
        await reset_statements(server)
    if pages is not None:
        notes += pages.notes("enqueues", args.enqueues)
        pages.start()
    profile = cProfile.Profile() if args.diagnose and not args.no_profile else None
    seconds, cpu, server_s, first = await timed_drain(
        engine, store, server, counter, drain, profile
    )
    if args.diagnose and kind == "postgres":
        notes += await statements(server, "drain", drain)
    if pages is not None:
        notes += pages.notes("drain", drain)
    if profile is not None:
        notes += profile_notes(profile, args.profile_dir, f"{kind}-{lane}-{backlog.size}-{round_}")
    await load(engine, max(drain - args.enqueues, 0), f"t{round_}-")
    await analyze(store)
    return Point(
        lane,
        backlog.size,
        drain / seconds,
        cpu / drain * 1e6,
        server_s / drain * 1e6,
        len(samples) / sum(samples),
        statistics.median(samples) * 1000,
        enqueue_cpu / len(samples) * 1e6,
        first * 1000,
        notes,
    )


# --- diagnosis ------------------------------------------------------------------------


async def reset_statements(server: Server) -> None:
    async with await psycopg.AsyncConnection.connect(await server.database(), autocommit=True) as c:
        await c.execute("SELECT pg_stat_statements_reset()")


async def statements(server: Server, what: str, jobs: int) -> list[str]:
    """The statements run since the last reset, busiest first, per job."""
    async with await psycopg.AsyncConnection.connect(await server.database(), autocommit=True) as c:
        cur = await c.execute(
            """SELECT calls, total_exec_time, total_plan_time, shared_blks_hit, shared_blks_read,
                      shared_blks_dirtied, shared_blks_written, wal_records, wal_fpi,
                      wal_bytes, blk_read_time, regexp_replace(left(query, 110), '\\s+', ' ', 'g')
               FROM pg_stat_statements
               WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                 AND query NOT LIKE '%%pg_stat_statements%%'
               ORDER BY total_exec_time DESC LIMIT 12"""
        )
        rows = await cur.fetchall()
    out = [
        f"{what}: per job: calls, exec µs, plan µs, blks hit/read/dirtied/written,"
        " WAL recs/FPI/bytes, read ms total"
    ]
    for calls, total, plan, hit, read, dirt, written, recs, fpi, wal, read_ms, query in rows:
        out.append(
            f"  {calls / jobs:6.3f} {total * 1000 / jobs:8.1f}µs {plan * 1000 / jobs:7.1f}µs"
            f"  {hit / jobs:6.1f} {read / jobs:5.2f}"
            f" {dirt / jobs:5.2f} {written / jobs:5.2f}  {recs / jobs:5.2f} {fpi / jobs:5.2f}"
            f" {float(wal) / jobs:7.0f}B  {read_ms:7.1f}  {query}"
        )
    return out


async def explain_reads(store: Store, lane: str) -> list[str]:
    """EXPLAIN (ANALYZE, BUFFERS) of the lane's reads on the loaded backlog."""
    from jobledger.storage.postgres import PostgresStore

    assert isinstance(store, PostgresStore)
    sql = store.sql
    cases: list[tuple[str, str, dict[str, Any]]]
    if lane == "fast":
        cases = [
            ("fast_pending_first", sql.fast_pending_first, {"p": 7, "limit": 100}),
            ("fast_pending_after", sql.fast_pending_after, {"p": 7, "limit": 100, "after": b"k5"}),
            ("next_due_fast", sql.next_due_fast, {"parts": list(range(64))}),
            ("inflight_in", sql.inflight_in, {"parts": list(range(64))}),
        ]
    else:
        from datetime import UTC, datetime

        now = datetime.now(UTC)
        cases = [("long_candidates", sql.long_candidates, {"now": now, "limit": 10})]
    out = []
    async with await psycopg.AsyncConnection.connect(store.dsn, autocommit=True) as conn:
        for name, text, params in cases:
            cur = await conn.execute(f"EXPLAIN (ANALYZE, BUFFERS) {text}", params)
            plan = [row[0] for row in await cur.fetchall()]
            out.append(f"explain {name}:")
            out += [f"    {line}" for line in plan]
    return out


class SqlitePages:
    """What the SQLite store's connections did over a stretch: each thread's CPU time
    (the loop's, the writer's, the reader's: cProfile sees only the loop's) and each
    connection's page cache counters (`sqlite3_db_status`: hits, misses, pages written,
    pages spilled mid-transaction), and the file's and the WAL's size."""

    #: SQLITE_DBSTATUS_CACHE_HIT, _MISS, _WRITE, _SPILL
    COUNTERS: ClassVar[dict[str, int]] = {"hit": 7, "miss": 8, "write": 9, "spill": 12}

    def __init__(self, store: Store) -> None:
        import _sqlite3

        from jobledger.storage.sqlite import SqliteStore

        assert isinstance(store, SqliteStore)
        self.store = store
        self.status = ctypes.CDLL(_sqlite3.__file__).sqlite3_db_status
        self.status.argtypes = [ctypes.c_void_p, ctypes.c_int, *[ctypes.POINTER(ctypes.c_int)] * 2]
        self.status.argtypes.append(ctypes.c_int)
        self.filename = ctypes.CDLL(_sqlite3.__file__).sqlite3_db_filename
        self.filename.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        self.filename.restype = ctypes.c_char_p

    def handle(self, conn: sqlite3.Connection) -> int:
        """The `sqlite3 *` of a connection: the first field after the object's header in
        CPython's connection object, checked by asking it for the store's file name."""
        db = int(ctypes.c_void_p.from_address(id(conn) + object.__basicsize__).value or 0)
        name = self.filename(db, b"main") if db else None
        if name is None or os.path.realpath(name.decode()) != os.path.realpath(self.store.path):
            raise SystemExit("--diagnose: this Python's sqlite3 connection layout is not known")
        return db

    def counters(self, reset: bool) -> dict[str, dict[str, int]]:
        out = {}
        conns = self.store.connections
        for name, conn in (("writer", conns.w.conn), ("reader", conns.r.conn)):
            values = {}
            for counter, op in self.COUNTERS.items():
                cur, high = ctypes.c_int(), ctypes.c_int()
                self.status(self.handle(conn), op, ctypes.byref(cur), ctypes.byref(high), reset)
                values[counter] = cur.value
            out[name] = values
        return out

    def threads(self) -> dict[str, float]:
        """CPU seconds of this process's threads by role, read from /proc."""
        out = {"loop": 0.0, "writer": 0.0, "reader": 0.0, "other": 0.0}
        tick = os.sysconf("SC_CLK_TCK")
        for thread in threading.enumerate():
            try:
                fields = Path(f"/proc/self/task/{thread.native_id}/stat").read_text()
            except OSError:
                continue
            utime, stime = fields.rsplit(")", 1)[1].split()[11:13]
            role = (
                "loop"
                if thread is threading.main_thread()
                else "writer"
                if thread.name.startswith("jobledger-sqlite-w")
                else "reader"
                if thread.name.startswith("jobledger-sqlite-r")
                else "other"
            )
            out[role] += (int(utime) + int(stime)) / tick
        return out

    def wal_bytes(self) -> int:
        path = Path(f"{self.store.path}-wal")
        return path.stat().st_size if path.exists() else 0

    def start(self) -> None:
        self.counters(reset=True)
        self.before = self.threads()

    def notes(self, what: str, jobs: int) -> list[str]:
        cpu = self.threads()
        counts = self.counters(reset=False)
        size = Path(self.store.path).stat().st_size
        out = [
            f"{what}: CPU µs a job by thread: "
            + ", ".join(f"{k} {(cpu[k] - self.before[k]) / jobs * 1e6:.0f}" for k in cpu)
            + f"; file {size / 2**20:.0f} MiB, WAL {self.wal_bytes() / 2**20:.0f} MiB"
        ]
        for name, values in counts.items():
            out.append(
                f"  {name} pages a job: "
                + ", ".join(f"{k} {v / jobs:.2f}" for k, v in values.items())
            )
        return out


def sqlite_plans(store: Store) -> list[str]:
    """EXPLAIN QUERY PLAN of the lanes' reads and the write path's statements."""
    from jobledger.storage.sqlite import SqliteStore, sql

    assert isinstance(store, SqliteStore)
    now = "2026-01-01T00:00:00+00:00"
    ids = '["a", "b"]'
    cases: list[tuple[str, str, tuple[Any, ...]]] = [
        ("fast_pending first", sql.fast_pending_sql(False), (7, 100)),
        ("fast_pending after", sql.fast_pending_sql(True), (7, "k5", 100)),
        ("next_due_fast", sql.NEXT_DUE_FAST, (7,)),
        ("inflight", sql.INFLIGHT, (7,)),
        ("long_candidates", sql.LONG_CANDIDATES, (now, 10, now, 10, 10)),
        ("job_versions", sql.JOB_VERSIONS_JSON, (ids,)),
        ("delete_jobs", sql.DELETE_JOBS_JSON, (ids,)),
        ("update_jobs", sql.UPDATE_JOBS_JSON, ('[["a"]]',)),
        ("dedupe_holders", sql.dedupe_holders_sql(1), ("x",)),
        ("job_stream_version", sql.JOB_STREAM_VERSION, ("a",)),
        ("last_version", sql.LAST_VERSION, ("job:a",)),
    ]
    db = sqlite3.connect(store.path)
    out = []
    try:
        for name, text, params in cases:
            params = params + (None,) * (text.count("?") - len(params))
            plan = db.execute(f"EXPLAIN QUERY PLAN {text}", params).fetchall()
            out.append(f"plan {name}: " + " | ".join(row[3] for row in plan))
        stat = db.execute("SELECT count(*) FROM jobs").fetchone()[0]
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        page = db.execute("PRAGMA page_size").fetchone()[0]
        out.append(f"jobs {stat:,} rows; file {pages * page / 2**20:.0f} MiB")
    finally:
        db.close()
    return out


def profile_notes(profile: cProfile.Profile, folder: str | None, name: str) -> list[str]:
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        profile.dump_stats(str(Path(folder) / f"{name}.pstats"))
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(10)
    lines = [line for line in text.getvalue().splitlines() if line.strip()]
    return ["pod profile (own time):", *[f"    {line}" for line in lines[-11:]]]


# --- the run ----------------------------------------------------------------------------


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f}, n={len(values)})"


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--sizes", default="20000,200000,1000000")
    parser.add_argument("--lanes", default="fast-alo,fast-amo,long")
    parser.add_argument("--drain", type=int, default=10_000, help="jobs drained per point")
    parser.add_argument("--long-drain", type=int, default=3_000, help="the same, long lane")
    parser.add_argument("--enqueues", type=int, default=1_000, help="single enqueues per point")
    parser.add_argument("--rounds", type=int, default=5, help="measurements of each size")
    parser.add_argument("--diagnose", action="store_true")
    parser.add_argument(
        "--private",
        action="store_true",
        help="run on a private cluster (as --diagnose does) without the diagnosis",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting of the private cluster, e.g. shared_buffers=1GB (repeatable)",
    )
    parser.add_argument(
        "--explain-ms",
        type=float,
        default=None,
        help="with --diagnose: auto_explain every statement slower than this into the"
        " server log, copied to --profile-dir (or here) as scale-server.log",
    )
    parser.add_argument("--profile-dir", default=None, help="where --diagnose writes .pstats")
    parser.add_argument(
        "--no-profile",
        action="store_true",
        help="with --diagnose: no cProfile of the drain (it slows the pod's loop thread)",
    )
    parser.add_argument("--verbose", action="store_true", help="print each point's notes")
    parser.add_argument(
        "--fill-cache",
        default=None,
        metavar="DIR",
        help="SQLite: fill each lane's files once into DIR (kept; the fast lane's serve both"
        " modes) and give every point a copy, instead of filling each point's own store",
    )
    args = parser.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    lanes = args.lanes.split(",")
    print(
        f"{args.store}: sizes {sizes}, lanes {lanes}, drain {args.drain}, enqueues {args.enqueues}"
    )
    print(f"load average at start: {load_average()}")
    results: list[list[Point]] = [[] for _ in range(args.rounds)]
    with tempfile.TemporaryDirectory() as tmpdir:
        server_cm = (
            private_server(args.explain_ms, args.profile_dir, args.set)
            if args.store == "postgres" and (args.diagnose or args.private)
            else _machine()
        )
        async with server_cm as server:
            for lane in lanes:
                async with AsyncExitStack() as stack:
                    began = time.perf_counter()
                    templates: dict[int, Path | None] = dict.fromkeys(sizes)
                    if args.store == "sqlite" and args.fill_cache:
                        await fill_templates(Path(args.fill_cache), lane, sizes)
                        templates = {
                            s: template_path(Path(args.fill_cache), lane, s) for s in sizes
                        }
                    backlogs = {
                        size: await open_backlog(
                            stack, args.store, server, Path(tmpdir), lane, size, templates[size]
                        )
                        for size in sizes
                    }
                    print(f"{lane}: backlogs loaded in {time.perf_counter() - began:.0f} s")
                    for round_ in range(args.rounds):
                        order = sizes if round_ % 2 == 0 else sizes[::-1]
                        points: list[Point] = []
                        for size in order:
                            p = await point(backlogs[size], server, lane, round_, args)
                            points.append(p)
                            print(
                                f"round {round_} {lane:8s} {size:>9,} pending: drain"
                                f" {p.drain:8,.0f} jobs/s (first run at {p.first_ms:.0f} ms;"
                                f" pod {p.pod_us:4.0f} µs, server {p.server_us:4.0f} µs CPU/job);"
                                f" enqueue {p.enqueue:6,.0f}/s (p50 {p.enqueue_p50_ms:.3f} ms,"
                                f" {p.enqueue_us:4.0f} µs CPU);"
                                f" load {load_average()}"
                            )
                            if args.verbose or args.diagnose:
                                for note in p.notes:
                                    print(f"    {note}")
                        print_ratios(round_, points, sizes[0])
                        results[round_] += points
    print_summary(results, lanes, sizes)
    print(f"load average at end: {load_average()}")
    return 0


@asynccontextmanager
async def _machine() -> AsyncIterator[Server]:
    yield Server(SERVER)


def print_ratios(round_: int, points: list[Point], smallest: int) -> None:
    for p in points:
        base = next(b for b in points if b.lane == p.lane and b.size == smallest)
        if p.size != smallest:
            print(
                f"  round {round_} {p.lane:8s} {p.size:>9,} / {smallest:,}: drain {p.drain / base.drain:.3f}x,"
                f" enqueue {p.enqueue / base.enqueue:.3f}x"
            )


def print_summary(results: list[list[Point]], lanes: list[str], sizes: list[int]) -> None:
    print(
        "\nsummary (median of the rounds; ratio to the smallest size of the same round: median (min-max, n))"
    )
    for lane in lanes:
        for size in sizes:
            pts = [p for run in results for p in run if p.lane == lane and p.size == size]
            bases = [
                next(b for b in run if b.lane == lane and b.size == sizes[0]) for run in results
            ]
            drain = statistics.median(p.drain for p in pts)
            enq = statistics.median(p.enqueue for p in pts)
            line = (
                f"  {lane:8s} {size:>9,}: drain {drain:8,.0f} jobs/s"
                f" (pod {statistics.median(p.pod_us for p in pts):4.0f},"
                f" server {statistics.median(p.server_us for p in pts):4.0f} µs CPU/job),"
                f" enqueue {enq:6,.0f}/s"
                f" ({statistics.median(p.enqueue_us for p in pts):4.0f} µs CPU)"
            )
            if size != sizes[0]:
                line += (
                    f"; ratio drain {spread([p.drain / b.drain for p, b in zip(pts, bases, strict=True)])},"
                    f" enqueue {spread([p.enqueue / b.enqueue for p, b in zip(pts, bases, strict=True)])}"
                )
            print(line)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
