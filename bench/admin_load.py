"""Worker throughput while API clients hammer the admin list and stats routes, with the
same run's throughput without API load as the baseline.

    .venv/bin/python bench/admin_load.py                      # SQLite, 50 clients, 20 s
    .venv/bin/python bench/admin_load.py --store postgres --clients 20 --seconds 60
    .venv/bin/python bench/admin_load.py --store postgres --private ...   # own cluster

A store is filled with `--backlog` jobs due tomorrow (a large jobs table for the list
routes to read). At 1,000 of them and again at `--backlog`, the CPU per request of each
list route is measured in process (ASGI, no network), with one uncapped `count(*)` of
the same rows beside it: the cost independent of the table is seen there. Then four
phases of `--seconds` each, every phase on a backlog of no-op jobs (at-least-once fast
lane) topped up to `--drain` before it starts:

* one process: `jobledger serve` runs the API and the workers, no API load;
* the same, with `--clients` clients looping over list (newest page, its next page by
  cursor, a status filter, a target filter) and stats requests;
* two processes: `jobledger serve --no-workers` (API) and `jobledger worker`, no load;
* the same two processes, with the clients.

Worker throughput is the drop of the no-op jobs' count over the phase (read from the
store at its edges, after 2 s of warm-up), so it is a rate only while the workers never
run out of work. `--drain` 0 (the default) sizes the backlog from a measured rate: a
calibration drains 30,000 no-op jobs with a `jobledger worker` alone and times the
middle 80 % of them, and every phase gets twice that rate times the phase, warm-up
included (on a shared machine one layout's rate swings 2x from minute to minute). A
phase that ends with no no-op job left "ran dry": its figure is a lower bound, the
bench says so and exits with status 1 (raise `--drain`).

The clients report requests/s and latency (p50 / p95 / p99 per route). Prints one line
per phase with the CPU seconds of every process over the window (the bench's own is the
clients'; with `--private` the server's too) and the cores the whole machine and these
processes kept busy, the ratios to the unloaded phase of the same layout, and the load
average at the start and end. `--no-stats` leaves `/api/v1/stats` out of the mix.
`--private` (PostgreSQL) runs on a private cluster on a free loopback port with the
machine's settings and `pg_stat_statements` (bench/scale.py), and prints the statements
that took the most server time in each phase. `--baseline-src DIR` runs every phase
twice, `jobledger` from DIR (a tree's src) and from this tree, alternating, on one
store migrated by this tree: a tree from before one of its migrations cannot run there
(its worker drains nothing, and the run fails). With
`--profile-dir DIR` the API process of the loaded phases runs under cProfile.
Performance lives here, never in timed tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
from pg_common import bench_dsn
from psycopg.conninfo import conninfo_to_dict

from jobledger.admin.jobs import JobAdmin
from jobledger.config.api_keys import parse_api_keys
from jobledger.core.clock import SystemClock
from jobledger.domain.jobs import JobStatus, NewJob
from jobledger.engine import Engine
from jobledger.http.app import create_app
from jobledger.http.auth import ApiKeys
from jobledger.http.services import Services
from jobledger.storage.port import JobFilter, Store
from jobledger.storage.urls import open_store

HERE = Path(__file__).resolve().parent
KEY = "bench-admin-key-0001"
APP = "admin_load_app:app"
NOOP, LATER = "bench:noop", "bench:later"
WARMUP_S = 2.0
CLI = "from jobledger.cli import main; raise SystemExit(main())"
#: the same under cProfile, its stats written to the file named by JOBLEDGER_BENCH_PROFILE
PROFILED = (
    "import cProfile, os; from jobledger.cli import main;"
    " cProfile.run('main()', os.environ['JOBLEDGER_BENCH_PROFILE'])"
)


@dataclass
class Phase:
    name: str
    jobs_per_s: float
    requests_per_s: float
    latency: str  # per route: p50 / p95 ms
    ran_dry: bool
    cpu: str  # CPU seconds of each process over the window


async def enqueue(store: Store, target: str, count: int, *, first: int = 0, **options: Any) -> None:
    engine = Engine(store)
    lane = "fast" if target == NOOP else "long"
    engine.targets.register(target, lane, _noop, delivery_mode="at_least_once")
    for start in range(first, first + count, 1000):
        async with engine.transaction() as tx:
            await engine.enqueue_many(
                [
                    NewJob(target, {"n": i}, key=f"{target}-{i}", **options)
                    for i in range(start, min(start + 1000, first + count))
                ],
                tx=tx,
            )


async def _noop(job: Any) -> None:
    return None


async def route_costs(store: Store, rows: int, rounds: int = 40) -> str:
    """CPU per request of each list route, in process (the app called through ASGI, no
    network, this process's every thread counted), and of one uncapped `count(*)` of
    the same PENDING rows: what a listing cost before its total was capped."""
    clock = SystemClock()
    app = create_app(
        Services(store, clock, JobAdmin(store, clock)),
        ApiKeys(parse_api_keys(f"{KEY}:admin:bench")),
    )
    headers = {"Authorization": f"Bearer {KEY}"}
    transport = httpx.ASGITransport(app=app)
    costs = []
    async with httpx.AsyncClient(transport=transport, base_url="http://b", headers=headers) as http:
        for path, params in [*LIST_ROUTES, ("/api/v1/jobs", {"page": "50", "limit": "100"})]:
            (await http.get(path, params=params)).raise_for_status()
            began = time.process_time()
            for _ in range(rounds):
                (await http.get(path, params=params)).raise_for_status()
            label = " ".join(f"{k}={v}" for k, v in params.items() if k != "limit") or "newest"
            costs.append(f"{label} {(time.process_time() - began) / rounds * 1000:.1f}")
    pending = JobFilter(status=JobStatus.PENDING)
    began = time.process_time()
    for _ in range(5):
        await store.admin.list_jobs(pending, offset=0, limit=0)
    full = (time.process_time() - began) / 5 * 1000
    return (
        f"at {rows:,} open jobs, CPU ms per list request: {', '.join(costs)};"
        f" an uncapped count(*) of them: {full:.1f} ms"
    )


async def remaining(store: Store) -> int:
    _, count = await store.admin.list_jobs(JobFilter(target=NOOP), offset=0, limit=0)
    return count


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`jobledger args…` in the bench folder (so `--app` finds the app), its output to
    `log` (a pipe nobody reads would fill up and stall it)."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-c", PROFILED if "JOBLEDGER_BENCH_PROFILE" in env else CLI, *args],
            cwd=HERE,
            env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def wait_serving(proc: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(r"serving (http://127\.0\.0\.1:\d+)", log.read_text())
        if found:
            return found.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise RuntimeError(f"jobledger serve did not start:\n{log.read_text()[-2000:]}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of process `pid` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


CORES = os.cpu_count() or 1


def machine_cpu() -> tuple[int, int]:
    """(busy, all) CPU ticks of the whole machine so far, every core (Linux /proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def server_cpu(postmaster: int | None) -> dict[int, float]:
    """CPU seconds so far of a PostgreSQL server's processes (the postmaster and its
    children) by pid; empty without one."""
    if postmaster is None:
        return {}
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue  # a process that ended meanwhile
        pid = int(stat.parent.name)
        if pid == postmaster or int(fields[1]) == postmaster:
            found[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return found


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


LIST_ROUTES = [
    ("/api/v1/jobs", {"limit": "100"}),
    ("/api/v1/jobs", {"status": "PENDING", "limit": "100"}),
    ("/api/v1/jobs", {"target": LATER, "limit": "50"}),
]
STATS_ROUTE: tuple[str, dict[str, str]] = ("/api/v1/stats", {})


async def hammer(
    base: str, clients: int, routes: list[tuple[str, dict[str, str]]], done: dict[str, list[float]]
) -> None:
    """`clients` loops over `routes` until cancelled; each answered request's latency
    goes to `done` under its route (a list answer with a `next` also fetches that page
    by cursor, timed as one)."""
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(
        base_url=base, headers=headers, limits=limits, timeout=600
    ) as http:

        async def client(n: int) -> None:
            while True:
                path, params = routes[(n + sum(map(len, done.values()))) % len(routes)]
                label = path.rsplit("/", 1)[1] + "".join(f" {k}" for k in params if k != "limit")
                began = time.monotonic()
                try:
                    response = await http.get(path, params=params)
                    response.raise_for_status()
                    body = response.json()
                    if path == "/api/v1/jobs" and body.get("next"):
                        nxt = await http.get(path, params={**params, "before": body["next"]})
                        nxt.raise_for_status()
                except httpx.HTTPError:
                    label = f"{label} FAILED"
                done.setdefault(label, []).append(time.monotonic() - began)

        await asyncio.gather(*(client(n) for n in range(clients)))


async def phase(
    name: str,
    store: Store,
    url: str,
    seconds: float,
    load: tuple[int, list[tuple[str, dict[str, str]]]],
    split: bool,
    logs: Path,
    src: str | None = None,
    profile: Path | None = None,
    server_pid: int | None = None,
) -> Phase:
    """Worker throughput and answered requests over a fixed window of `seconds`
    (requests still waiting at its end are dropped, not waited for); `src`: the
    processes run `jobledger` from that folder instead of this tree; `profile`: with
    clients, the API process runs under cProfile and writes its stats there;
    `server_pid`: a private cluster's postmaster, whose processes' CPU is counted too."""
    env = {"JOBLEDGER_STORE": url, "JOBLEDGER_API_KEYS": f"{KEY}:admin:bench"}
    if src is not None:
        env["PYTHONPATH"] = str(Path(src).resolve())
    if profile is not None and load[0]:
        where = profile / f"{re.sub(r'[^a-z0-9]+', '-', name.lower())}.pstats"
        env["JOBLEDGER_BENCH_PROFILE"] = str(where.resolve())
    serve = ["serve", "--port", "0", "--app", APP] + (["--no-workers"] if split else [])
    procs = [start(serve, env, logs / "serve.log")]
    clients, routes = load
    latencies: dict[str, list[float]] = {}
    try:
        base = wait_serving(procs[0], logs / "serve.log")
        if split:
            unprofiled = {k: v for k, v in env.items() if k != "JOBLEDGER_BENCH_PROFILE"}
            procs.append(start(["worker", "--app", APP], unprofiled, logs / "worker.log"))
        await asyncio.sleep(WARMUP_S)
        # a count reads the rows as of its start: the window is timed from there
        began = time.monotonic()
        before = await remaining(store)
        cpu_began = [cpu_seconds(p.pid) for p in procs] + [time.process_time()]
        server_began, machine_began = server_cpu(server_pid), machine_cpu()
        task = asyncio.create_task(hammer(base, clients, routes, latencies)) if clients else None
        await asyncio.sleep(seconds - (time.monotonic() - began))
        elapsed = time.monotonic() - began
        after = await remaining(store)
        cpu_used = [
            end - start
            for end, start in zip(
                [cpu_seconds(p.pid) for p in procs] + [time.process_time()],
                cpu_began,
                strict=True,
            )
        ]
        server_used = sum(
            used - server_began.get(pid, 0.0) for pid, used in server_cpu(server_pid).items()
        )
        busy, ticks = (end - start for end, start in zip(machine_cpu(), machine_began, strict=True))
        answered = sum(map(len, latencies.values()))
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    finally:
        stop(procs)
    return Phase(
        name,
        (before - after) / elapsed,
        answered / elapsed,
        ", ".join(f"{label} {percentiles(ms)}" for label, ms in sorted(latencies.items())),
        after == 0,
        ", ".join(
            f"{who} {used:.1f} s"
            for who, used in zip(
                ["serve", "worker", "bench"] if split else ["serve", "bench"],
                cpu_used,
                strict=True,
            )
        )
        + (f", PostgreSQL {server_used:.1f} s" if server_pid is not None else "")
        + f"; cores busy: the machine's {busy / ticks * CORES:.2f} of {CORES},"
        f" these processes' {(sum(cpu_used) + server_used) / elapsed:.2f}",
    )


def percentiles(seconds: list[float]) -> str:
    ms = sorted(x * 1000 for x in seconds)

    def rank(q: float) -> float:
        return ms[min(len(ms) - 1, math.ceil(len(ms) * q) - 1)]

    return f"p50 {statistics.median(ms):.0f} / p95 {rank(0.95):.0f} / p99 {rank(0.99):.0f} ms"


CLIENTS, NO_LOAD = "clients", "no API load"


def plan(clients: int, baseline: str | None) -> list[tuple[str, int, bool, str | None]]:
    """(name, clients, split, src folder or None for this tree) of every phase: the four
    layouts, and with a `baseline` each one twice, the trees alternating (base first,
    then this tree first, ...) so the machine's drift hits both alike."""
    phases: list[tuple[str, int, bool, str | None]] = []
    for n, (layout, split) in enumerate(
        (("one process", False), ("API and worker processes", True))
    ):
        for m, (load, count) in enumerate(((NO_LOAD, 0), (f"{clients} {CLIENTS}", clients))):
            if baseline is None:
                phases.append((f"{layout}, {load}", count, split, None))
                continue
            trees = [("base", baseline), ("this tree", None)]
            if (n + m) % 2:
                trees.reverse()
            for tree, src in trees:
                phases.append((f"{tree}: {layout}, {load}", count, split, src))
    return phases


CALIBRATION = 30_000  # no-op jobs the calibration drains
MARGIN = 2.0  # the backlog a phase gets: this times the calibrated rate times the phase


async def calibrate(store: Store, url: str, seconds: float, log: Path, first: int) -> int:
    """A backlog no phase runs out of: `CALIBRATION` no-op jobs drained by a worker
    alone, timed from the count's first drop below 90 % to its first below 10 %, gives
    the unloaded rate; the backlog is `MARGIN` times that rate over the phase and its
    warm-up, in whole 10,000s."""
    await enqueue(store, NOOP, CALIBRATION, first=first)
    proc = start(["worker", "--app", APP], {"JOBLEDGER_STORE": url}, log)
    marks: list[tuple[float, int]] = []
    try:
        while (left := await remaining(store)) > CALIBRATION // 10:
            if left < CALIBRATION * 9 // 10:
                marks.append((time.monotonic(), left))
            await asyncio.sleep(0.05)
        marks.append((time.monotonic(), left))
        while await remaining(store):
            await asyncio.sleep(0.2)
    finally:
        stop([proc])
    (t0, c0), (t1, c1) = marks[0], marks[-1]
    rate = (c0 - c1) / max(t1 - t0, 1e-3)
    backlog = math.ceil(rate * (seconds + WARMUP_S) * MARGIN / 10_000) * 10_000
    print(f"calibration: a worker alone drains {rate:,.0f} jobs/s; {backlog:,} a phase")
    return backlog


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument(
        "--drain", type=int, default=0, help="no-op jobs a phase starts with (0: calibrated)"
    )
    parser.add_argument(
        "--no-stats", action="store_true", help="list routes only (no /api/v1/stats)"
    )
    parser.add_argument(
        "--private", action="store_true", help="PostgreSQL: a private cluster for the run"
    )
    parser.add_argument(
        "--baseline-src",
        default=None,
        help="a tree's src folder: every phase also runs `jobledger` from it, alternating",
    )
    parser.add_argument(
        "--profile-dir",
        default=None,
        help="run the API process of the loaded phases under cProfile; .pstats files here",
    )
    args = parser.parse_args()
    profile = Path(args.profile_dir) if args.profile_dir else None
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()
    async with contextlib.AsyncExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        server = None
        if args.store == "postgres" and args.private:
            from scale import private_server

            server = await stack.enter_async_context(private_server(None, None, []))
        url, schema, dsn = await new_store_url(args.store, tmp, server)
        store = open_store(url)
        await store.open()
        try:
            small = min(1000, args.backlog)
            await enqueue(store, LATER, small, run_at=tomorrow())
            print(await route_costs(store, small))
            await enqueue(store, LATER, args.backlog - small, run_at=tomorrow(), first=small)
            print(await route_costs(store, args.backlog))
            routes = LIST_ROUTES if args.no_stats else [*LIST_ROUTES, STATS_ROUTE]
            enqueued = 0
            drain = args.drain
            if not drain:
                drain = await calibrate(store, url, args.seconds, tmp / "calibration.log", 0)
                enqueued = CALIBRATION
            print(
                f"{args.store}: {args.backlog} jobs due tomorrow, {drain} no-op jobs at the"
                f" start of each phase, routes: {', '.join(sorted({p for p, _ in routes}))}"
            )
            results: list[Phase] = []
            for name, clients, split, tree in plan(args.clients, args.baseline_src):
                logs = tmp / f"phase{len(results)}"
                logs.mkdir()
                missing = drain - await remaining(store)
                await enqueue(store, NOOP, missing, first=enqueued)
                enqueued += max(missing, 0)
                await reset_statements(dsn)
                result = await phase(
                    name,
                    store,
                    url,
                    args.seconds,
                    (clients, routes),
                    split,
                    logs,
                    tree,
                    profile,
                    postmaster(server),
                )
                results.append(result)
                dry = " RAN DRY (a lower bound: raise --drain)" if result.ran_dry else ""
                if not result.jobs_per_s:
                    dry = " DRAINED NOTHING (its worker did not run: see its log)"
                api = (
                    f"; API {result.requests_per_s:,.0f} req/s ({result.latency})"
                    if clients
                    else ""
                )
                print(
                    f"{name}: worker {result.jobs_per_s:,.0f} jobs/s{dry}{api};"
                    f" CPU over the {args.seconds:.0f} s: {result.cpu}",
                    flush=True,
                )
                print(await top_statements(dsn), end="", flush=True)
        finally:
            await store.close()
            await drop_schema(schema, dsn)
    for loaded in results:
        if not loaded.name.endswith(CLIENTS):
            continue
        unloaded = loaded.name.replace(f"{args.clients} {CLIENTS}", NO_LOAD)
        idle = next(r for r in results if r.name == unloaded)
        ratio = loaded.jobs_per_s / max(idle.jobs_per_s, 1e-9)
        invalid = unmeasured(loaded) or unmeasured(idle)
        print(
            f"{loaded.name}: {ratio:.2f}x of {idle.name}"
            + (" NOT MEASURED: a phase ran dry or drained nothing" if invalid else "")
        )
    load_end = os.getloadavg()
    first, last = (" ".join(f"{x:.2f}" for x in load) for load in (load_start, load_end))
    print(f"load average at start {first}, at end {last} ({os.cpu_count()} cores)")
    if any(unmeasured(r) for r in results):
        print(
            "FAILED: a phase ran out of no-op jobs or its worker drained none (a tree that"
            " cannot run on this store's schema, a worker that failed to start); its"
            " worker rate is not measured"
        )
        return 1
    return 0


def unmeasured(result: Phase) -> bool:
    """A phase whose worker rate is no figure: it ran dry, or its worker drained nothing."""
    return result.ran_dry or not result.jobs_per_s


def postmaster(server: Any) -> int | None:
    """The pid of a private cluster's server (None on the machine's server or SQLite)."""
    if server is None or server.private is None:
        return None
    return int((server.private.data / "postmaster.pid").read_text().split()[0])


def tomorrow() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC) + timedelta(days=1)


async def new_store_url(kind: str, tmp: Path, server: Any) -> tuple[str, str | None, str | None]:
    """A new empty store's URL, its schema and its database's DSN: a SQLite file in
    `tmp`, or a fresh schema of the PostgreSQL bench database (`bench/pg_common.py`, or
    the private cluster's `server`; the schema is dropped at the end)."""
    if kind == "sqlite":
        return f"sqlite:///{tmp / 'admin-load.db'}", None, None
    schema = f"bench_admin_{int(time.time())}"
    dsn = await (server.database() if server is not None else bench_dsn())
    parts = conninfo_to_dict(dsn)
    where = f"{parts.get('user', 'postgres')}@{parts.get('host')}:{parts.get('port', 5432)}"
    return f"postgresql://{where}/{parts['dbname']}?schema={schema}", schema, dsn


async def drop_schema(schema: str | None, dsn: str | None) -> None:
    if schema is None or dsn is None:
        return
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


async def has_statements(conn: psycopg.AsyncConnection[Any]) -> bool:
    cur = await conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements'")
    return await cur.fetchone() is not None


async def reset_statements(dsn: str | None) -> None:
    """Zero `pg_stat_statements` (where it is installed) before a phase."""
    if dsn is None:
        return
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        if await has_statements(conn):
            await conn.execute("SELECT pg_stat_statements_reset()")


async def top_statements(dsn: str | None, count: int = 6) -> str:
    """The statements that took the most server time since the last reset, one line each
    (empty without `pg_stat_statements`)."""
    if dsn is None:
        return ""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        if not await has_statements(conn):
            return ""
        cur = await conn.execute(
            "SELECT calls, total_exec_time, regexp_replace(query, '\\s+', ' ', 'g')"
            " FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT %s",
            (count,),
        )
        rows = await cur.fetchall()
    return "".join(
        f"    {calls:>8,} calls {total / 1000:7.1f} s  {query[:110]}\n"
        for calls, total, query in rows
    )


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
