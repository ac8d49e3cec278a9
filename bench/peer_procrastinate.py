"""jobledger against Procrastinate, the same run, the same PostgreSQL server.

    python3 -m venv PEER_VENV        # any folder outside this checkout's .venv
    PEER_VENV/bin/pip install procrastinate 'psycopg[binary]'
    .venv/bin/python bench/peer_procrastinate.py --peer-python PEER_VENV/bin/python

(or set PEER_PYTHON instead of passing --peer-python). Procrastinate is not a
dependency of jobledger: its side runs as a subprocess of its own venv (this same file,
`--peer-side ...`, which imports nothing of jobledger) and answers one JSON line;
jobledger's side runs in this process. Both use the database `jobledger_peer_bench`
(created if missing) with a schema each, dropped and recreated for every measurement.

Measures, each side alternately for `--rounds` rounds, medians reported:
(1) drain: N no-op jobs enqueued first (untimed), then the time from starting one
    worker until all ran and their outcomes are stored. jobledger: one Runtime, fast
    lane, at-least-once and at-most-once. Procrastinate: one worker (`wait=False`), at
    each concurrency of `--peer-concurrency`.
(2) wake: an idle worker; one job enqueued in its own committed transaction; time from
    the end of the commit to the handler's first line; `--samples` per round, spaced;
    jobledger at-least-once and at-most-once (whose mark, like Procrastinate's claim,
    commits before the handler runs).
(3) enqueue in the caller's transaction: BEGIN; INSERT a business row; enqueue one job;
    COMMIT, median per transaction, next to the same transaction without the enqueue;
    the side that goes first alternates from round to round. Like with like: an enqueue-only process on both sides (a web process: no
    worker, nobody in it LISTENs — jobledger's store opens its LISTEN connection only
    for a feed subscriber), then each process with a listener of its own receiving
    every enqueue's NOTIFY, as a worker in the same process would (jobledger: a feed
    subscription read by a task; Procrastinate: a connection LISTENing on
    `procrastinate_any_queue_v1`, the channel of a worker serving every queue). Both
    write on the caller's one connection; a third variant puts jobledger's enqueue
    through `engine.transaction()` (a checkout from its pool per transaction). Each
    side also reports its process's CPU time per transaction (the client's share).
    `--baseline-src DIR` adds jobledger from another source tree, taking turns with
    the other two: a before/after in one run (both jobledger sides then run as
    subprocesses of this interpreter, as Procrastinate's does in its own).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

SERVER = os.environ.get("JOBLEDGER_BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
DATABASE = "jobledger_peer_bench"
JL_SCHEMA = "peer_jobledger"
PEER_SCHEMA = "peer_procrastinate"
CHUNK = 1000
NO_FLUSH_ENV = "JOBLEDGER_PEER_NO_FLUSH"
#: this tree's jobledger sources (the jobledger side's subprocess under --baseline-src)
THIS_SRC = str(Path(__file__).resolve().parent.parent / "src")
#: (3)'s variants: label -> (a listener in each process, jobledger on the caller's own
#: connection as Procrastinate's `configure(connection=conn)` is, or through
#: `engine.transaction()`: a checkout from the store's pool per transaction)
TX_VARIANTS = {
    "enqueue-only process, caller's connection": (False, True),
    "with a listener, caller's connection": (True, True),
    "enqueue-only process, jobledger through engine.transaction()": (False, False),
}

SETUP_HELP = """\
The Procrastinate side needs its own interpreter (Procrastinate is not a dependency
of jobledger and must not be installed into its venv). Set it up once:

    python3 -m venv PEER_VENV
    PEER_VENV/bin/pip install procrastinate 'psycopg[binary]'

(PEER_VENV: any folder outside this checkout's .venv), then pass
--peer-python PEER_VENV/bin/python or export PEER_PYTHON=PEER_VENV/bin/python
"""


# --- shared helpers (both interpreters) ----------------------------------------------------
def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_dsn(schema: str | None = None) -> str:
    """Every connection of both sides; `--no-flush` (inherited by the Procrastinate side
    through NO_FLUSH_ENV) adds `synchronous_commit=off`: the commits then skip the WAL
    flush, whose time on a shared disk can swing several-fold from minute to minute."""
    from psycopg.conninfo import make_conninfo

    options = [f"-c search_path={schema}"] if schema is not None else []
    if os.environ.get(NO_FLUSH_ENV):
        options.append("-c synchronous_commit=off")
    if not options:
        return make_conninfo(SERVER, dbname=DATABASE)
    return make_conninfo(SERVER, dbname=DATABASE, options=" ".join(options))


async def ensure_database() -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(SERVER, autocommit=True) as admin:
        cur = await admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,))
        if not await cur.fetchone():
            await admin.execute(f'CREATE DATABASE "{DATABASE}"')


async def reset_schema(schema: str, *, create: bool = True) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(bench_dsn(), autocommit=True) as conn:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        if create:
            await conn.execute(f'CREATE SCHEMA "{schema}"')


async def timed(n: int, step: Callable[[int], Awaitable[object]], offset: int = 0) -> list[float]:
    out = []
    for i in range(n):
        began = time.perf_counter()
        await step(offset + i)
        out.append(time.perf_counter() - began)
    return out


async def interleaved(
    raw: Callable[[int], Awaitable[object]], with_job: Callable[[int], Awaitable[object]], n: int
) -> dict[str, float]:
    """Medians of the time per transaction without and with the job (ms), and this
    process's CPU time per transaction of each (µs: the client side, its kernel time
    included): 200 warm-up calls each, then three alternating thirds of `n`, so drift
    hits both sides alike."""
    await timed(200, raw)
    await timed(200, with_job)
    base: list[float] = []
    ours: list[float] = []
    cpu = [0.0, 0.0]
    for part in range(3):
        began = time.process_time()
        base += await timed(n // 3, raw, 1000 + part * n)
        cpu[0] += time.process_time() - began
        began = time.process_time()
        ours += await timed(n // 3, with_job, 1000 + part * n)
        cpu[1] += time.process_time() - began
    return {
        "raw_ms": statistics.median(base) * 1000,
        "ms": statistics.median(ours) * 1000,
        "raw_cpu_us": cpu[0] / len(base) * 1e6,
        "cpu_us": cpu[1] / len(ours) * 1e6,
    }


# --- Procrastinate side (runs in the peer venv) -------------------------------------------
async def peer_app() -> Any:
    procrastinate: Any = importlib.import_module("procrastinate")
    await reset_schema(PEER_SCHEMA)
    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=bench_dsn(PEER_SCHEMA))
    )
    await app.open_async()
    await app.schema_manager.apply_schema_async()
    return app


async def peer_drain(jobs: int, concurrency: int) -> dict[str, Any]:
    app = await peer_app()
    done = 0

    @app.task(name="noop")  # type: ignore[untyped-decorator]
    async def noop(i: int) -> None:
        nonlocal done
        done += 1

    try:
        for start in range(0, jobs, CHUNK):
            await noop.batch_defer_async(
                *({"i": i} for i in range(start, min(start + CHUNK, jobs)))
            )
        began = time.perf_counter()
        await app.run_worker_async(
            concurrency=concurrency, wait=False, install_signal_handlers=False
        )
        elapsed = time.perf_counter() - began
        async with app.connector.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
            )
            row = await cur.fetchone()
        assert done == jobs and row is not None and row[0] == jobs, (done, row)
    finally:
        await app.close_async()
        await reset_schema(PEER_SCHEMA, create=False)
    return {"rate": jobs / elapsed, "seconds": elapsed}


async def peer_wake(samples: int, gap: float) -> dict[str, Any]:
    app = await peer_app()
    arrived = asyncio.Event()
    stamp = [0.0]

    @app.task(name="wake")  # type: ignore[untyped-decorator]
    async def wake(i: int) -> None:
        stamp[0] = time.perf_counter()
        arrived.set()

    worker = asyncio.create_task(app.run_worker_async(install_signal_handlers=False))
    out: list[float] = []
    try:
        await asyncio.sleep(0.5)
        for i in range(samples + 20):
            arrived.clear()
            await wake.defer_async(i=i)  # its own transaction, committed on return
            committed = time.perf_counter()
            await asyncio.wait_for(arrived.wait(), 10)
            if i >= 20:
                out.append((stamp[0] - committed) * 1000)
            await asyncio.sleep(gap)
    finally:
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker
        await app.close_async()
        await reset_schema(PEER_SCHEMA, create=False)
    return {"ms": out}


async def peer_listening(listen: bool) -> tuple[Any, asyncio.Task[None] | None]:
    """A connection LISTENing as a Procrastinate worker's would, and its reader."""
    import psycopg

    if not listen:
        return None, None
    conn = await psycopg.AsyncConnection.connect(bench_dsn(PEER_SCHEMA), autocommit=True)
    await conn.execute('LISTEN "procrastinate_any_queue_v1"')

    async def read() -> None:
        async for _note in conn.notifies():
            pass

    return conn, asyncio.create_task(read())


async def peer_tx(n: int, listen: bool) -> dict[str, Any]:
    import psycopg

    app = await peer_app()
    listener, reader = await peer_listening(listen)

    @app.task(name="business")  # type: ignore[untyped-decorator]
    async def business(i: int) -> None:
        return None

    conn = await psycopg.AsyncConnection.connect(bench_dsn(PEER_SCHEMA))
    try:
        await conn.execute("CREATE TABLE business (id bigint, note text)")
        await conn.commit()

        async def raw(i: int) -> None:
            async with conn.transaction():
                await conn.execute("INSERT INTO business VALUES (%s, %s)", (i, "x"))

        async def with_job(i: int) -> None:
            async with conn.transaction():
                await conn.execute("INSERT INTO business VALUES (%s, %s)", (i, "x"))
                await business.configure(connection=conn).defer_async(i=i)

        result = await interleaved(raw, with_job, n)
    finally:
        if reader is not None:
            reader.cancel()
            await listener.close()
        await conn.close()
        await app.close_async()
        await reset_schema(PEER_SCHEMA, create=False)
    return result


async def peer_main(args: argparse.Namespace) -> None:
    version = importlib.import_module("importlib.metadata").version
    result: dict[str, Any]
    if args.peer_side == "drain":
        result = await peer_drain(args.jobs, args.concurrency)
    elif args.peer_side == "wake":
        result = await peer_wake(args.samples, args.gap)
    else:
        result = await peer_tx(args.single, args.listen)
    result["version"] = version("procrastinate")
    print(json.dumps(result))


def run_baseline(src: str, single: str, *extra: str) -> dict[str, Any]:
    """(3)'s jobledger side in a subprocess of this interpreter with jobledger imported
    from another source tree (`--baseline-src`): the same run's before/after."""
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--jl-side", "--single", single, *extra],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([src, str(Path(__file__).parent)])},
    )
    if proc.returncode != 0:
        raise SystemExit(f"baseline side failed:\n{proc.stderr}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def run_peer(python: str, side: str, *extra: str) -> dict[str, Any]:
    proc = subprocess.run(
        [python, str(Path(__file__).resolve()), "--peer-side", side, *extra],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    if proc.returncode != 0:
        raise SystemExit(f"Procrastinate side {side} failed:\n{proc.stderr}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


# --- jobledger side (runs in this process, the project venv) ------------------------------
async def jl_store() -> Any:
    from jobledger.storage.postgres import PostgresStore

    await reset_schema(JL_SCHEMA, create=False)
    store = PostgresStore(bench_dsn(), schema=JL_SCHEMA, pool_max=10)
    await store.open()
    return store


async def jl_drain(jobs: int, mode: str) -> dict[str, Any]:
    from jobledger.domain.jobs import Job, NewJob
    from jobledger.engine import Engine
    from jobledger.reactors.runtime import Runtime

    store = await jl_store()
    try:
        engine = Engine(store)
        done = 0

        async def noop(job: Job) -> None:
            nonlocal done
            done += 1

        engine.targets.register("bench:noop", "fast", noop, delivery_mode=mode)
        for start in range(0, jobs, CHUNK):
            async with engine.transaction() as tx:
                await engine.enqueue_many(
                    [
                        NewJob("bench:noop", {"i": i}, key=f"k{i}")
                        for i in range(start, min(start + CHUNK, jobs))
                    ],
                    tx=tx,
                )
        lane = engine.targets.get("bench:noop").lane
        runtime = Runtime(engine, pod_id="peer-bench")
        began = time.perf_counter()
        await runtime.start()
        while done < jobs:
            await asyncio.sleep(0.002)
        while await store.queue.next_due(list(range(64)), lane):
            await asyncio.sleep(0.002)
        elapsed = time.perf_counter() - began
        await runtime.stop()
    finally:
        await store.close()
        await reset_schema(JL_SCHEMA, create=False)
    return {"rate": jobs / elapsed, "seconds": elapsed}


async def jl_wake(samples: int, gap: float, mode: str) -> dict[str, Any]:
    from wake_latency import wake_samples

    from jobledger.engine import Engine

    store = await jl_store()
    try:
        out = await wake_samples(Engine(store), samples, gap, "peer-bench", mode)
    finally:
        await store.close()
        await reset_schema(JL_SCHEMA, create=False)
    return {"ms": out}


async def jl_tx(n: int, listen: bool, own_conn: bool) -> dict[str, Any]:
    import psycopg

    from jobledger.domain.jobs import Job
    from jobledger.engine import Engine

    store = await jl_store()
    reader: asyncio.Task[None] | None = None
    if listen:  # what a Runtime's feed task does: subscribed, reading every wake
        feed = await store.feed().open()

        async def read() -> None:
            async for _wake in feed:
                pass

        reader = asyncio.create_task(read())
    try:
        engine = Engine(store)

        async def nothing(job: Job) -> None:
            return None

        engine.targets.register("bench:business", "fast", nothing)
        s = store.s
        async with store.pool.connection() as conn:
            await conn.execute(f"CREATE TABLE {s}.business (id bigint, note text)")

        own = await psycopg.AsyncConnection.connect(bench_dsn())

        async def raw(i: int) -> None:
            if own_conn:
                async with own.transaction():
                    await own.execute(f"INSERT INTO {s}.business VALUES (%s, %s)", (i, "x"))
                return
            async with store.pool.connection() as conn, conn.transaction():
                await conn.execute(f"INSERT INTO {s}.business VALUES (%s, %s)", (i, "x"))

        async def with_job(i: int) -> None:
            if own_conn:
                async with own.transaction():
                    await own.execute(f"INSERT INTO {s}.business VALUES (%s, %s)", (i, "x"))
                    await engine.enqueue("bench:business", {"i": i}, tx=own, key=f"k{i}")
                return
            async with engine.transaction() as tx:
                await tx.native.execute(f"INSERT INTO {s}.business VALUES (%s, %s)", (i, "x"))
                await engine.enqueue("bench:business", {"i": i}, tx=tx, key=f"k{i}")

        try:
            result = await interleaved(raw, with_job, n)
        finally:
            await own.close()
    finally:
        if reader is not None:
            reader.cancel()
        await store.close()
        await reset_schema(JL_SCHEMA, create=False)
    return result


# --- the driver --------------------------------------------------------------------------
def loadavg() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def med(rounds: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(float(r[key]) for r in rounds))


async def driver(args: argparse.Namespace, peer: str) -> None:
    await ensure_database()
    concurrencies = [int(c) for c in args.peer_concurrency.split(",")]
    jl: dict[str, list[dict[str, Any]]] = {}
    pr: dict[str, list[dict[str, Any]]] = {}
    base: dict[str, list[dict[str, Any]]] = {}  # (3) of the --baseline-src tree
    version = ""
    loads = [loadavg()]
    print(f"load average (1/5/15 min) at start: {loads[0]}", flush=True)
    if os.environ.get(NO_FLUSH_ENV):
        print("both sides with synchronous_commit=off (--no-flush)", flush=True)
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds}", flush=True)
        if "drain" in args.only:
            for mode in ("at_least_once", "at_most_once"):
                jl.setdefault(f"drain {mode}", []).append(await jl_drain(args.jobs, mode))
            for c in concurrencies:
                res = run_peer(peer, "drain", "--jobs", str(args.jobs), "--concurrency", str(c))
                pr.setdefault(f"drain c={c}", []).append(res)
                version = res["version"]
        if "wake" in args.only:
            for mode in ("at_least_once", "at_most_once"):
                jl.setdefault(f"wake {mode}", []).append(
                    await jl_wake(args.samples, args.gap, mode)
                )
            res = run_peer(peer, "wake", "--samples", str(args.samples), "--gap", str(args.gap))
            pr.setdefault("wake", []).append(res)
            version = res["version"]
        if "tx" in args.only:
            sides = ["jl", "pr", "base"] if args.baseline_src else ["jl", "pr"]
            sides = sides[r % len(sides) :] + sides[: r % len(sides)]  # who goes first
            for key, (listen, own_conn) in TX_VARIANTS.items():
                flag = ["--listen"] if listen else []
                for side in sides:
                    pool = [] if own_conn else ["--pool"]
                    if side == "jl" and args.baseline_src:  # a subprocess too, like the baseline
                        res = run_baseline(THIS_SRC, str(args.single), *flag, *pool)
                        jl.setdefault(key, []).append(res)
                        continue
                    if side == "jl":
                        jl.setdefault(key, []).append(await jl_tx(args.single, listen, own_conn))
                        continue
                    if side == "base":
                        res = run_baseline(args.baseline_src, str(args.single), *flag, *pool)
                        base.setdefault(key, []).append(res)
                        continue
                    res = run_peer(peer, "tx", "--single", str(args.single), *flag)
                    pr.setdefault(key, []).append(res)
                    version = res["version"]
        loads.append(loadavg())
    print(f"load average (1/5/15 min) after each round: {' | '.join(loads[1:])}")
    print(
        f"versions: jobledger (this tree), procrastinate {version}, python {sys.version.split()[0]}"
    )
    print(f"medians over {args.rounds} rounds, sides alternating")

    if "drain" in args.only:
        print(f"(1) drain of {args.jobs} no-op jobs, one worker")
        for key, rounds in {**jl, **pr}.items():
            if key.startswith("drain"):
                side = "jobledger" if key in jl else "procrastinate"
                rates = ", ".join(f"{x['rate']:,.0f}" for x in rounds)
                print(f"  {side:13s} {key[6:]:14s} {med(rounds, 'rate'):9,.0f} jobs/s  ({rates})")
        best_c = max(concurrencies, key=lambda c: med(pr[f"drain c={c}"], "rate"))
        best = med(pr[f"drain c={best_c}"], "rate")
        for mode in ("at_least_once", "at_most_once"):
            for c in concurrencies:
                ratio = med(jl[f"drain {mode}"], "rate") / med(pr[f"drain c={c}"], "rate")
                print(f"  ratio jobledger {mode} / procrastinate c={c}: {ratio:.2f}x")
        print(f"  (procrastinate's best concurrency here: {best_c}, {best:,.0f} jobs/s)")
    if "wake" in args.only:
        print(
            f"(2) commit → handler, idle worker, {args.samples} samples x {args.rounds} rounds,"
            f" {args.gap * 1000:.0f} ms apart"
        )
        stats: dict[str, tuple[float, float]] = {}
        sides = (
            ("jobledger ALO", jl["wake at_least_once"]),
            ("jobledger AMO", jl["wake at_most_once"]),
            ("procrastinate", pr["wake"]),
        )
        for side, rounds in sides:
            p50 = statistics.median(statistics.median(x["ms"]) for x in rounds)
            p99 = statistics.median(pct(x["ms"], 0.99) for x in rounds)
            stats[side] = (p50, p99)
            slow = sum(1 for x in rounds for v in x["ms"] if v > 1000)
            print(
                f"  {side:13s} p50 {p50:8.2f} ms   p99 {p99:8.2f} ms"
                f"   ({slow} of {args.samples * args.rounds} samples over 1 s)"
            )
        p50, p99 = stats["procrastinate"]
        for side in ("jobledger ALO", "jobledger AMO"):
            j50, j99 = stats[side]
            print(f"  ratio {side} / procrastinate: p50 {j50 / p50:.2f}x   p99 {j99 / p99:.2f}x")
    if "tx" in args.only:
        print(
            f"(3) one enqueue in the caller's transaction with a business row,"
            f" median per transaction ({args.single} per round)"
        )
        if args.baseline_src:
            print(f"  ('baseline': jobledger from {args.baseline_src}, the same bench code)")
        for key in TX_VARIANTS:
            print(f"  {key}:")
            named = {"jobledger": jl[key], "procrastinate": pr[key], "baseline": base.get(key)}
            for side, rounds in named.items():
                if not rounds:
                    continue
                raw, ms = med(rounds, "raw_ms"), med(rounds, "ms")
                each = ", ".join(f"{x['ms']:.2f}/{x['raw_ms']:.2f}" for x in rounds)
                print(
                    f"    {side:13s} raw BEGIN;INSERT;COMMIT {raw:6.2f} ms"
                    f"   + enqueue {ms:6.2f} ms"
                    f"   ({ms / raw:.2f}x its raw; rounds, with/raw: {each});"
                    f" client CPU {med(rounds, 'cpu_us'):.0f} µs/tx"
                    f" (raw {med(rounds, 'raw_cpu_us'):.0f})"
                )
            pairs = [("jobledger", "procrastinate")]
            if base.get(key):
                pairs += [("baseline", "procrastinate"), ("jobledger", "baseline")]
            for one, other in pairs:
                ratio = med(named[one] or [], "ms") / med(named[other] or [], "ms")
                per_round = ", ".join(
                    f"{a['ms'] / b['ms']:.2f}"
                    for a, b in zip(named[one] or [], named[other] or [], strict=True)
                )
                print(
                    f"    time ratio {one} / {other}: {ratio:.2f}x"
                    f" (rate {1 / ratio:.2f}x; rounds {per_round})"
                )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--peer-python",
        default=os.environ.get("PEER_PYTHON"),
        help="interpreter of a venv with procrastinate (or PEER_PYTHON)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2000, help="drain: jobs per drain")
    parser.add_argument(
        "--peer-concurrency",
        default="1,30",
        help="drain: Procrastinate worker concurrencies to try",
    )
    parser.add_argument("--samples", type=int, default=200, help="wake: samples per round")
    parser.add_argument("--gap", type=float, default=0.05, help="wake: seconds between samples")
    parser.add_argument("--single", type=int, default=600, help="tx: transactions per round")
    parser.add_argument("--only", default="drain,wake,tx")
    parser.add_argument(
        "--no-flush",
        action="store_true",
        help="both sides' sessions with synchronous_commit=off (no WAL flush per commit)",
    )
    parser.add_argument(
        "--baseline-src",
        help="tx: also run jobledger's side from this source tree"
        " (e.g. path/to/other/checkout/src)"
        " in a subprocess, taking turns with the other two: a same-run before/after",
    )
    parser.add_argument("--peer-side", choices=["drain", "wake", "tx"], help=argparse.SUPPRESS)
    parser.add_argument("--jl-side", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--pool", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--listen", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.no_flush:
        os.environ[NO_FLUSH_ENV] = "1"
    if args.peer_side:
        asyncio.run(peer_main(args))
        return 0
    if args.jl_side:
        asyncio.run(ensure_database())
        print(json.dumps(asyncio.run(jl_tx(args.single, args.listen, not args.pool))))
        return 0
    peer = args.peer_python
    if not peer or not Path(peer).exists():
        print(
            f"no Procrastinate interpreter (--peer-python / PEER_PYTHON: {peer!r}).\n\n"
            + SETUP_HELP,
            file=sys.stderr,
        )
        return 2
    check = subprocess.run(
        [peer, "-c", "import procrastinate, psycopg"], capture_output=True, text=True, check=False
    )
    if check.returncode != 0:
        print(
            f"{peer} cannot import procrastinate/psycopg:\n{check.stderr}\n" + SETUP_HELP,
            file=sys.stderr,
        )
        return 2
    asyncio.run(driver(args, peer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
