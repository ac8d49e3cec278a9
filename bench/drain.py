"""Drain throughput of a no-op target, fast lane, one pod, with a same-run raw baseline.

    .venv/bin/python bench/drain.py --store sqlite --jobs 20000
    .venv/bin/python bench/drain.py --store postgres --jobs 50000
    .venv/bin/python bench/drain.py --store postgres --jobs 50000 --pods 2
    .venv/bin/python bench/drain.py --store postgres --modes at_most_once --rounds 5 \\
        --baseline-src path/to/other/checkout/src

For each delivery mode: enqueue N no-op jobs (distinct keys, all partitions; not timed),
start a Runtime, and time until the queue is empty; the engine line also shows this
process's CPU time per job (the rest of the wall time is the database and other load). The baseline is the raw driver draining a
plain table of N rows with `DELETE … RETURNING` in batches of 100 (no events, no
ordering, no leases): the floor of what the database itself can do. Prints jobs/s and
the engine/raw ratio. Performance lives here, never in timed tests.

`--modes` picks the delivery modes, `--rounds` repeats the whole measurement (each round
has its own raw baseline). `--baseline-src DIR` (DIR or DIR/src holds a `jobledger`
package, e.g. `git archive <rev> src` of the tree before) runs each engine drain in a
subprocess on this tree's code and on DIR's, in turns (A B, then B A in the next
round), and prints the ratio of this tree to the baseline per round and their median.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from pg_common import SERVER
from pg_common import fresh_store as pg_fresh_store

from jobledger.config.settings import Settings
from jobledger.domain.jobs import Job, NewJob
from jobledger.engine import Engine
from jobledger.reactors.runtime import Runtime
from jobledger.storage.port import Store

BENCH_APP = "jobledger_drain_bench"


@asynccontextmanager
async def fresh_store(kind: str, tmp: Path) -> AsyncIterator[Store]:
    """An empty store of `kind` (memory, sqlite or postgres) for one bench run; a
    PostgreSQL schema of its own, dropped afterwards. The other benches use it too."""
    if kind == "postgres":
        async with pg_fresh_store(app=BENCH_APP, pool_max=10) as pg:
            yield pg
        return
    store: Store
    if kind == "sqlite":
        from jobledger.storage.sqlite import SqliteStore

        tmp.mkdir(parents=True, exist_ok=True)
        store = SqliteStore(str(tmp / f"bench-{uuid.uuid4().hex[:6]}.db"))
    else:
        from jobledger.storage.memory import MemoryStore

        store = MemoryStore()
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def enqueue_noops(engine: Engine, jobs: int) -> None:
    """`jobs` no-op jobs with distinct keys (all partitions), 1,000 per transaction."""
    for start in range(0, jobs, 1000):
        async with engine.transaction() as tx:
            await engine.enqueue_many(
                [
                    NewJob("bench:noop", None, key=f"k{i}")
                    for i in range(start, min(start + 1000, jobs))
                ],
                tx=tx,
            )


async def engine_drain(kind: str, tmp: Path, jobs: int, mode: str) -> float:
    async with fresh_store(kind, tmp) as store:
        # the collector tuned as `jobledger worker` runs (D29)
        engine = Engine(store, settings=Settings(gc_freeze=True))
        done = 0

        async def noop(job: Job) -> None:
            nonlocal done
            done += 1

        engine.targets.register("bench:noop", "fast", noop, delivery_mode=mode)
        await enqueue_noops(engine, jobs)  # setup, not timed
        runtime = Runtime(engine, pod_id="bench")
        lag = asyncio.create_task(loop_lag())
        began = time.perf_counter()
        cpu = time.process_time()
        server_cpu = ServerCpu()
        if kind == "postgres":
            await server_cpu.start()
        await runtime.start()
        while done < jobs:
            await asyncio.sleep(0.005)
        while await store.queue.next_due(list(range(64)), engine.targets.get("bench:noop").lane):
            await asyncio.sleep(0.005)
        elapsed = time.perf_counter() - began
        cpu = time.process_time() - cpu
        server_used = await server_cpu.seconds() if kind == "postgres" else 0.0
        commits = runtime.committer.commits
        lag.cancel()
        stall = max(LAGS, default=0.0) * 1000
        LAGS.clear()
        await runtime.stop()
        server = (
            f" its PostgreSQL backends {server_used / jobs * 1e6:.0f} µs CPU/job,"
            if kind == "postgres"
            else ""
        )
        print(
            f"  engine {mode:14s} {jobs / elapsed:10,.0f} jobs/s  ({elapsed:.2f} s,"
            f" {commits} commits, this process {cpu / jobs * 1e6:.0f} µs CPU/job,{server}"
            f" longest event-loop stall {stall:.0f} ms)"
        )
        return jobs / elapsed


LAGS: list[float] = []


def backend_ticks(pids: list[int]) -> dict[int, int]:
    """CPU clock ticks used so far by each of these server processes (from /proc)."""
    ticks: dict[int, int] = {}
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2 :].split()
        ticks[pid] = int(fields[11]) + int(fields[12])  # utime + stime
    return ticks


async def our_backends() -> list[int]:
    """The server processes of this bench's store (its connections carry BENCH_APP)."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(SERVER, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (BENCH_APP,)
        )
        return [int(row[0]) for row in await cur.fetchall()]


class ServerCpu:
    """CPU time of this bench's own PostgreSQL backends over a stretch of time (other
    sessions on the same server are not counted; the WAL writer and checkpointer are not
    either). Backends that appear meanwhile count from their start."""

    async def start(self) -> None:
        self.before = backend_ticks(await our_backends())

    async def seconds(self) -> float:
        now = backend_ticks(await our_backends())
        used = sum(t - self.before.get(pid, 0) for pid, t in now.items())
        return used / os.sysconf("SC_CLK_TCK")


async def loop_lag(every: float = 0.01) -> None:
    """How late a 10 ms timer fires: the longest stall any task (the lease heartbeat
    included) could suffer while the lanes drain."""
    while True:
        start = time.perf_counter()
        await asyncio.sleep(every)
        LAGS.append(time.perf_counter() - start - every)


def raw_sqlite(tmp: Path, jobs: int, *, synchronous: str = "NORMAL") -> float:
    """Drain `jobs` rows of a bare queue table in pages of 100 (one DELETE…RETURNING and
    one commit a page): the same-run baseline of the SQLite benches."""
    conn = sqlite3.connect(tmp / f"raw-{uuid.uuid4().hex[:6]}.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("CREATE TABLE q (id INTEGER PRIMARY KEY, payload TEXT)")
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO q (payload) VALUES (?)", [("x",)] * jobs)
    conn.execute("COMMIT")
    began = time.perf_counter()
    drained = 0
    while True:
        conn.execute("BEGIN IMMEDIATE")
        rows = conn.execute(
            "DELETE FROM q WHERE id IN (SELECT id FROM q ORDER BY id LIMIT 100) RETURNING id"
        ).fetchall()
        conn.execute("COMMIT")
        if not rows:
            break
        drained += len(rows)
    elapsed = time.perf_counter() - began
    conn.close()
    print(f"  raw sqlite DELETE…RETURNING ({synchronous}) {drained / elapsed:10,.0f} rows/s")
    return drained / elapsed


async def raw_postgres(jobs: int) -> float:
    import psycopg

    table = f"raw_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(SERVER, autocommit=True) as conn:
        await conn.execute(f"CREATE UNLOGGED TABLE {table} (id bigserial primary key, p text)")
        await conn.execute(
            f"INSERT INTO {table} (p) SELECT 'x' FROM generate_series(1, %s)", (jobs,)
        )
        began = time.perf_counter()
        drained = 0
        while True:
            cur = await conn.execute(
                f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} ORDER BY id"
                " LIMIT 100 FOR UPDATE SKIP LOCKED) RETURNING id"
            )
            rows = await cur.fetchall()
            if not rows:
                break
            drained += len(rows)
        elapsed = time.perf_counter() - began
        await conn.execute(f"DROP TABLE {table}")
    print(f"  raw postgres DELETE…RETURNING {drained / elapsed:10,.0f} rows/s")
    return drained / elapsed


# --- several pods: one process each, 64 / N partitions each --------------------------


def _pod_process(dsn: str, schema: str, mode: str, pod: str, ready: Any, go: Any, out: Any) -> None:
    """One pod in its own process: a Runtime on the shared schema with the no-op target;
    it reports its CPU seconds once the parent says stop."""
    from jobledger.storage.postgres import PostgresStore

    async def run() -> None:
        store = PostgresStore(dsn, schema=schema, pool_max=10)
        await store.open()
        # the collector tuned as `jobledger worker` runs (D29)
        engine = Engine(store, settings=Settings(gc_freeze=True))

        async def noop(job: Job) -> None:
            return None

        engine.targets.register("bench:noop", "fast", noop, delivery_mode=mode)
        runtime = Runtime(engine, pod_id=pod)
        ready.set()
        await asyncio.get_running_loop().run_in_executor(None, go.wait)
        cpu = time.process_time()
        await runtime.start()
        while not go.stop.is_set():
            await asyncio.sleep(0.01)
        out.put((pod, time.process_time() - cpu, len(runtime.fast.workers)))
        await runtime.stop()
        await store.close()

    asyncio.run(run())


class _Go:
    """Start and stop flags shared with the pod processes."""

    def __init__(self, ctx: Any) -> None:
        self.start = ctx.Event()
        self.stop = ctx.Event()

    def wait(self) -> None:
        self.start.wait()


async def pods_drain(jobs: int, mode: str, pods: int) -> float:
    """`pods` worker processes drain `jobs` no-op jobs from one PostgreSQL schema. The
    pods' liveness rows are written first, so each takes its fair share (64 / pods) at
    start instead of the first one taking all 64."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    async with fresh_store("postgres", Path()) as store:
        from jobledger.storage.postgres import PostgresStore

        assert isinstance(store, PostgresStore)
        engine = Engine(store, settings=Settings())
        engine.targets.register("bench:noop", "fast", lambda job: None, delivery_mode=mode)
        await enqueue_noops(engine, jobs)  # setup, not timed
        names = [f"bench-{n}" for n in range(pods)]
        for name in names:
            await store.coordination.heartbeat(name, engine.clock.now())
        go, out = _Go(ctx), ctx.Queue()
        readies = [ctx.Event() for _ in names]
        procs = [
            ctx.Process(
                target=_pod_process, args=(store.dsn, store.schema, mode, name, ready, go, out)
            )
            for name, ready in zip(names, readies, strict=True)
        ]
        for proc in procs:
            proc.start()
        for ready in readies:
            await asyncio.get_running_loop().run_in_executor(None, ready.wait)
        server_cpu = ServerCpu()
        await server_cpu.start()
        began = time.perf_counter()
        go.start.set()
        while await store.queue.next_due(list(range(64)), engine.targets.get("bench:noop").lane):
            await asyncio.sleep(0.005)
        elapsed = time.perf_counter() - began
        server_used = await server_cpu.seconds()
        go.stop.set()
        reports = [out.get(timeout=60) for _ in procs]
        for proc in procs:
            proc.join(timeout=60)
        pod_cpu = sum(cpu for _, cpu, _ in reports)
        shares = "/".join(str(owned) for _, _, owned in sorted(reports))
        print(
            f"  engine {mode:14s} {jobs / elapsed:10,.0f} jobs/s  ({elapsed:.2f} s, {pods} pods"
            f" owning {shares} partitions, pods {pod_cpu / jobs * 1e6:.0f} µs CPU/job,"
            f" their PostgreSQL backends {server_used / jobs * 1e6:.0f} µs CPU/job)"
        )
        return jobs / elapsed


THIS_SRC = Path(__file__).resolve().parent.parent / "src"
RESULT = "drain-result"


def source_dir(folder: str) -> Path:
    src = Path(folder).resolve()
    src = src / "src" if (src / "src" / "jobledger").is_dir() else src
    if not (src / "jobledger").is_dir():
        raise SystemExit(f"--baseline-src {folder}: no jobledger package in {src}")
    return src


def drain_in(src: Path, store: str, jobs: int, mode: str, label: str) -> float:
    """One engine drain in a subprocess running the `jobledger` of `src`: its jobs/s."""
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{Path(__file__).parent}"}
    args = [sys.executable, __file__, "--store", store, "--jobs", str(jobs), "--one", mode]
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=True).stdout
    rate = 0.0
    for line in out.splitlines():
        if line.startswith(RESULT):
            rate = float(line.split()[1])
        else:
            print(f"{line}  [{label}]")
    return rate


def ab_rounds(args: argparse.Namespace, tmp: Path, modes: list[str]) -> None:
    """This tree and `--baseline-src` in turns, `--rounds` times; each round's raw baseline."""
    sides = [("this tree", THIS_SRC), ("baseline", source_dir(args.baseline_src))]
    ratios: dict[str, list[float]] = {mode: [] for mode in modes}
    to_raw: dict[str, list[float]] = {mode: [] for mode in modes}
    for round_ in range(args.rounds):
        print(f"round {round_ + 1}, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        raw = (
            raw_sqlite(tmp, args.jobs)
            if args.store == "sqlite"
            else asyncio.run(raw_postgres(args.jobs))
        )
        for mode in modes:
            order = sides if round_ % 2 == 0 else sides[::-1]
            rates = {name: drain_in(src, args.store, args.jobs, mode, name) for name, src in order}
            ratios[mode].append(rates["this tree"] / rates["baseline"])
            to_raw[mode].append(rates["this tree"] / raw)
            print(
                f"  {mode:14s} this tree / baseline = {ratios[mode][-1]:.3f};"
                f" this tree / raw = {to_raw[mode][-1]:.3f},"
                f" baseline / raw = {rates['baseline'] / raw:.3f}"
            )
    for mode in modes:
        shown = " ".join(f"{r:.2f}" for r in ratios[mode])
        print(
            f"{mode:14s} this tree / baseline per round: {shown}; median"
            f" {statistics.median(ratios[mode]):.3f}; this tree / raw"
            f" {min(to_raw[mode]):.3f}-{max(to_raw[mode]):.3f}"
        )


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--modes", default="at_least_once,at_most_once")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--baseline-src", default=None, metavar="DIR")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # a side's subprocess
    parser.add_argument(
        "--pods",
        type=int,
        default=1,
        help="worker processes (PostgreSQL only); 1: the pod runs in this process",
    )
    return parser.parse_args(argv)


async def main(args: argparse.Namespace) -> int:
    modes = args.modes.split(",")
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        if args.one:
            print(f"{RESULT} {await engine_drain(args.store, tmp, args.jobs, args.one)}")
            return 0
        print(f"{args.store}: drain of {args.jobs} no-op jobs")
        for _ in range(args.rounds):
            raw = (
                raw_sqlite(tmp, args.jobs)
                if args.store == "sqlite"
                else await raw_postgres(args.jobs)
            )
            results: dict[str, Any] = {}
            for mode in modes:
                if args.pods > 1 and args.store == "postgres":
                    results[mode] = await pods_drain(args.jobs, mode, args.pods)
                else:
                    results[mode] = await engine_drain(args.store, tmp, args.jobs, mode)
            for mode, rate in results.items():
                print(f"  ratio {mode:14s} engine/raw = {rate / raw:.3f}")
    return 0


def run(argv: list[str]) -> int:
    args = parse(argv)
    if args.baseline_src is None:
        return asyncio.run(main(args))
    with tempfile.TemporaryDirectory() as tmpdir:
        print(f"{args.store}: drain of {args.jobs} no-op jobs, this tree and a baseline")
        ab_rounds(args, Path(tmpdir), args.modes.split(","))
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
