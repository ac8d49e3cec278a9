"""Enqueue in the caller's transaction, jobledger against Procrastinate, in lockstep.

What it measures: the time of two transactions on one psycopg connection of the
caller's, on the same PostgreSQL server (peer_procrastinate's database), per side:

    raw  BEGIN; INSERT a business row; COMMIT
    job  the same plus one enqueue on that connection: jobledger
         `engine.enqueue("bench:business", {"i": i}, tx=conn, key=f"k{i}")` (a fast-lane
         target registered with default settings), Procrastinate
         `task.configure(connection=conn).defer_async(i=i)`

Each side is a persistent subprocess answering JSON commands ("run K transactions of
kind raw|job") on stdin/stdout: jobledger of this tree, Procrastinate in its own venv
(this file under that interpreter imports nothing of jobledger), and optionally
jobledger from other source trees (`--baseline-src`). After a warm-up the driver runs
`--cycles` cycles; in each, every side runs `--batch` raw and `--batch` job
transactions back to back, the side order rotating from cycle to cycle and the
raw/job order alternating, so the minute-to-minute drift of a noisy shared VM (WAL
flush times above all) hits every side alike.

    .venv/bin/python bench/enqueue_lockstep.py --peer-python PEER_VENV/bin/python
        [--cycles 40] [--batch 100] [--warmup 200] [--no-flush]
        [--baseline-src DIR | --baseline-src NAME=DIR ...]

(or PEER_PYTHON instead of --peer-python; see peer_procrastinate.SETUP_HELP). The
defaults make 8,400 transactions per side: about 20 s for two sides at ~1 ms each,
minutes when the disk's commit flushes are slow. `--no-flush` runs every side's
sessions with synchronous_commit=off (no WAL flush per commit, whose time on a shared
disk swings several-fold). A baseline DIR is a source tree's `src` (or the checkout
holding it).

The figures, per side:
  raw ms, job ms      median time of one transaction over all cycles' samples
  job-raw             the difference of those medians: what the enqueue adds
  CPU µs raw / job    the side process's CPU time (process_time: user + system, the
                      client's share only) per transaction of each kind
and for each jobledger side, against Procrastinate (> 1: jobledger is faster):
  rate overall        Procrastinate's median job time / this side's
  per cycle           the median, and quartiles, of the same ratio taken cycle by
                      cycle (each cycle's medians): drift shows as a wide spread
plus the load average (1/5/15 min) at start and end. Every schema is dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NoReturn

import peer_procrastinate as pp

PEER = "procrastinate"
THIS = Path(__file__).resolve()
INSERT = "INSERT INTO {table} VALUES (%s, %s)"


# --- a side: the two transactions on the caller's connection (both interpreters) --------
@dataclass
class Side:
    raw: Callable[[int], Awaitable[None]]
    job: Callable[[int], Awaitable[None]]
    conn: Any  # the caller's psycopg connection
    close: Callable[[bool], Awaitable[None]]  # close(drop the schema)
    about: str  # version or source path


async def open_side(kind: str, schema: str, *, fresh: bool = True) -> Side:
    """`kind` PEER or "jobledger", in `schema` of peer_procrastinate's database
    (JOBLEDGER_BENCH_PG_DSN's server). fresh: the schema dropped and created anew with a
    business table; else it is reused as it is (enqueue_instructions' server runs)."""
    import psycopg

    await pp.ensure_database()
    if kind == PEER:
        procrastinate: Any = importlib.import_module("procrastinate")
        pp.PEER_SCHEMA = schema  # peer_app reads it
        if fresh:
            app = await pp.peer_app()
        else:
            connector = procrastinate.PsycopgConnector(conninfo=pp.bench_dsn(schema))
            app = procrastinate.App(connector=connector)
            await app.open_async()

        @app.task(name="business")  # type: ignore[untyped-decorator]
        async def business(i: int) -> None:
            return None

        conn = await psycopg.AsyncConnection.connect(pp.bench_dsn(schema))
        table = "business"
        about = importlib.import_module("importlib.metadata").version("procrastinate")

        async def enqueue(i: int) -> None:
            await business.configure(connection=conn).defer_async(i=i)

        shut: Callable[[], Awaitable[None]] = app.close_async
    else:
        from jobledger.domain.jobs import Job
        from jobledger.engine import Engine
        from jobledger.storage.postgres import PostgresStore

        pp.JL_SCHEMA = schema  # jl_store reads it
        if fresh:
            store = await pp.jl_store()
        else:
            store = PostgresStore(pp.bench_dsn(), schema=schema, pool_max=2)
            await store.open()
        engine = Engine(store)

        async def nothing(job: Job) -> None:
            return None

        engine.targets.register("bench:business", "fast", nothing)
        conn = await psycopg.AsyncConnection.connect(pp.bench_dsn())
        table = f"{store.s}.business"
        about = str(Path(importlib.import_module("jobledger").__file__ or "").parent.parent)

        async def enqueue(i: int) -> None:
            await engine.enqueue("bench:business", {"i": i}, tx=conn, key=f"k{i}")

        shut = store.close
    if fresh:
        await conn.execute(f"CREATE TABLE {table} (id bigint, note text)")
        await conn.commit()
    insert = INSERT.format(table=table)

    async def raw(i: int) -> None:
        async with conn.transaction():
            await conn.execute(insert, (i, "x"))

    async def job(i: int) -> None:
        async with conn.transaction():
            await conn.execute(insert, (i, "x"))
            await enqueue(i)

    async def close(drop: bool) -> None:
        await conn.close()
        await shut()
        if drop:
            await pp.reset_schema(schema, create=False)

    return Side(raw, job, conn, close, about)


async def serve(kind: str, schema: str) -> None:
    """The side process: answers {"op": "run", "what": "raw"|"job", "n": K} with
    {"t": [seconds per transaction], "cpu": process seconds}; {"op": "quit"} ends it."""
    proto: IO[str] = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever a library prints goes to stderr, not into the protocol
    side = await open_side(kind, schema)
    proto.write(json.dumps({"ready": True, "about": side.about}) + "\n")
    counter = 0
    try:
        while line := await asyncio.to_thread(sys.stdin.readline):
            cmd = json.loads(line)
            if cmd["op"] == "quit":
                break
            step = side.raw if cmd["what"] == "raw" else side.job
            out = []
            cpu = time.process_time()
            for _ in range(cmd["n"]):
                counter += 1
                began = time.perf_counter()
                await step(counter)
                out.append(time.perf_counter() - began)
            cpu = time.process_time() - cpu
            proto.write(json.dumps({"t": out, "cpu": cpu}) + "\n")
    finally:
        await side.close(True)


# --- the sides: names, interpreters, source trees (shared with enqueue_instructions) ----
@dataclass
class Spec:
    name: str
    python: str
    src: str | None  # jobledger's source folder (None: Procrastinate)

    @property
    def kind(self) -> str:
        return PEER if self.src is None else "jobledger"

    def schema(self, prefix: str) -> str:
        return f"{prefix}_{re.sub(r'[^a-z0-9_]', '_', self.name.lower())}"

    def env(self, **extra: str) -> dict[str, str]:
        env = {**os.environ, **extra}
        if self.src is not None:  # this tree's or a baseline's jobledger first
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [self.src, env.get("PYTHONPATH")]))
        return env


def fail(message: str) -> NoReturn:
    print(message, file=sys.stderr)
    raise SystemExit(2)


def peer_python(given: str | None) -> str:
    """The Procrastinate interpreter, checked; else exit with SETUP_HELP."""
    if not given or not Path(given).exists():
        fail(
            f"no Procrastinate interpreter (--peer-python / PEER_PYTHON: {given!r})\n\n{pp.SETUP_HELP}"
        )
    check = [given, "-c", "import procrastinate, psycopg"]
    if subprocess.run(check, capture_output=True, check=False).returncode != 0:
        fail(f"{given} cannot import procrastinate and psycopg\n\n{pp.SETUP_HELP}")
    return given


def sides(peer: str, baselines: list[str]) -> list[Spec]:
    """Procrastinate, this tree's jobledger, then each `--baseline-src [NAME=]DIR`."""
    out = [Spec(PEER, peer, None), Spec("jobledger", sys.executable, pp.THIS_SRC)]
    for n, spec in enumerate(baselines, 1):
        name, eq, folder = spec.partition("=")
        name, folder = (name, folder) if eq else ("", spec)
        name = name or ("baseline" if n == 1 else f"baseline{n}")
        src = Path(folder).resolve()
        src = src / "src" if (src / "src" / "jobledger").is_dir() else src
        if not (src / "jobledger").is_dir() or name in {s.name for s in out}:
            fail(f"--baseline-src {spec}: no {src}/jobledger, or the name {name!r} is taken")
        out.append(Spec(name, sys.executable, str(src)))
    return out


def add_side_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--peer-python",
        default=os.environ.get("PEER_PYTHON"),
        help="interpreter of a venv with procrastinate and psycopg (or PEER_PYTHON)",
    )
    parser.add_argument(
        "--baseline-src",
        action="append",
        default=[],
        metavar="[NAME=]DIR",
        help="also jobledger from this source tree (repeatable)",
    )
    parser.add_argument(
        "--no-flush",
        action="store_true",
        help="every side's sessions with synchronous_commit=off (no WAL flush per commit)",
    )


# --- the driver -----------------------------------------------------------------------------
class Proc:
    def __init__(self, spec: Spec, schema: str) -> None:
        self.spec = spec
        self.proc = subprocess.Popen(
            [spec.python, str(THIS), "--side", spec.kind, "--schema", schema],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
            env=spec.env(),
        )
        self.about = self.reply()["about"]
        if spec.src is not None and not self.about.startswith(spec.src.rstrip("/")):
            self.quit()
            fail(f"side {spec.name}: imported jobledger from {self.about}, not {spec.src}")

    def reply(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            fail(f"side {self.spec.name} ended (exit {self.proc.wait()}); its stderr is above")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ask(self, what: str, n: int) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": "run", "what": what, "n": n}) + "\n")
        return self.reply()

    def quit(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            self.proc.stdin.write('{"op": "quit"}\n')
            self.proc.stdin.close()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4)
    return q1, q2, q3


def lockstep(specs: list[Spec], args: argparse.Namespace) -> None:
    asyncio.run(pp.ensure_database())
    schemas = {s.name: s.schema("lockstep") for s in specs}
    print(f"load average (1/5/15 min) at start: {loadavg()}", flush=True)
    procs: dict[str, Proc] = {}
    try:
        for spec in specs:
            procs[spec.name] = Proc(spec, schemas[spec.name])
        for proc in procs.values():
            proc.ask("raw", args.warmup)
            proc.ask("job", args.warmup)
        res = {n: {"raw": [], "job": [], "cpu_raw": 0.0, "cpu_job": 0.0, "cyc": []} for n in procs}
        names = list(procs)
        for c in range(args.cycles):
            order = names[c % len(names) :] + names[: c % len(names)]
            for name in order:
                for what in ("raw", "job") if c % 2 else ("job", "raw"):
                    got = procs[name].ask(what, args.batch)
                    res[name][what] += got["t"]
                    res[name]["cpu_" + what] += got["cpu"]
                    if what == "job":
                        res[name]["cyc"].append(statistics.median(got["t"]))
            if (c + 1) % 10 == 0:
                print(f"  cycle {c + 1}/{args.cycles}", file=sys.stderr, flush=True)
    finally:
        for proc in procs.values():
            proc.quit()
        for schema in schemas.values():  # a side that died left its schema behind
            asyncio.run(pp.reset_schema(schema, create=False))
    flush = "synchronous_commit=off" if args.no_flush else "synchronous_commit=on"
    print(
        f"{args.cycles} cycles x {args.batch} transactions per side and kind"
        f" (after {args.warmup} of each), side order rotating, raw/job alternating; {flush}"
    )
    for spec in specs:
        print(f"  {spec.name}: {procs[spec.name].about} ({spec.python})")
    print(f"  {'side':14s} {'raw ms':>8s} {'job ms':>8s} {'job-raw':>8s}   CPU µs/tx raw    job")
    n = args.cycles * args.batch
    for name, r in res.items():
        raw, job = statistics.median(r["raw"]) * 1e3, statistics.median(r["job"]) * 1e3
        print(
            f"  {name:14s} {raw:8.3f} {job:8.3f} {job - raw:8.3f}"
            f"   {r['cpu_raw'] / n * 1e6:13.0f} {r['cpu_job'] / n * 1e6:6.0f}"
        )
    ref = res[PEER]
    for name, r in res.items():
        if name == PEER:
            continue
        overall = statistics.median(ref["job"]) / statistics.median(r["job"])
        q1, q2, q3 = quartiles([p / o for o, p in zip(r["cyc"], ref["cyc"], strict=True)])
        print(
            f"  rate {name} / {PEER} (job tx): overall {overall:.3f}x;"
            f" per cycle median {q2:.3f}x (q1 {q1:.3f}, q3 {q3:.3f})"
        )
    print(f"load average (1/5/15 min) at end: {loadavg()}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_side_arguments(parser)
    parser.add_argument("--cycles", type=int, default=40)
    parser.add_argument("--batch", type=int, default=100, help="transactions per kind and cycle")
    parser.add_argument("--warmup", type=int, default=200, help="transactions per kind first")
    parser.add_argument("--side", choices=[PEER, "jobledger"], help=argparse.SUPPRESS)
    parser.add_argument("--schema", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        asyncio.run(serve(args.side, args.schema))
        return 0
    if args.no_flush:
        os.environ[pp.NO_FLUSH_ENV] = "1"  # inherited by every side: pp.bench_dsn adds it
    lockstep(sides(peer_python(args.peer_python), args.baseline_src), args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
