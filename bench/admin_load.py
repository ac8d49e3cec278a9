"""Worker throughput while API clients hammer the admin list and stats routes, with the
same run's throughput without API load as the baseline.

    .venv/bin/python bench/admin_load.py                      # SQLite, 50 clients, 20 s
    .venv/bin/python bench/admin_load.py --store postgres --clients 50 --seconds 20

A store is filled with `--backlog` jobs due tomorrow (a large jobs table for the list
routes to read). At 1,000 of them and again at `--backlog`, the CPU per request of each
list route is measured in process (ASGI, no network), with one uncapped `count(*)` of
the same rows beside it: the cost independent of the table is seen there. Then four phases of `--seconds` each, every phase on `--drain` fresh
no-op jobs (at-least-once fast lane):

* one process: `jobledger serve` runs the API and the workers, no API load;
* the same, with `--clients` clients looping over list (newest page, its next page by
  cursor, a status filter, a target filter) and stats requests;
* two processes: `jobledger serve --no-workers` (API) and `jobledger worker`, no load;
* the same two processes, with the clients.

Worker throughput is the drop of the no-op jobs' count over the phase (read from the
store at its edges, after 2 s of warm-up). The clients report requests/s and latency.
Prints one line per phase, the ratios to the unloaded phase of the same layout, and the
load average at the start and end. `--no-stats` leaves `/api/v1/stats` out of the mix. Performance lives here, never in timed tests.
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
            [sys.executable, "-c", CLI, *args],
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
STATS_ROUTE = ("/api/v1/stats", {})


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
    drain: int,
    seconds: float,
    load: tuple[int, list[tuple[str, dict[str, str]]]],
    split: bool,
    logs: Path,
) -> Phase:
    """Worker throughput and answered requests over a fixed window of `seconds`
    (requests still waiting at its end are dropped, not waited for)."""
    await enqueue(store, NOOP, drain)
    env = {"JOBLEDGER_STORE": url, "JOBLEDGER_API_KEYS": f"{KEY}:admin:bench"}
    serve = ["serve", "--port", "0", "--app", APP] + (["--no-workers"] if split else [])
    procs = [start(serve, env, logs / "serve.log")]
    clients, routes = load
    latencies: dict[str, list[float]] = {}
    try:
        base = wait_serving(procs[0], logs / "serve.log")
        if split:
            procs.append(start(["worker", "--app", APP], env, logs / "worker.log"))
        await asyncio.sleep(WARMUP_S)
        before = await remaining(store)
        began = time.monotonic()
        cpu_began = [cpu_seconds(p.pid) for p in procs] + [time.process_time()]
        task = asyncio.create_task(hammer(base, clients, routes, latencies)) if clients else None
        await asyncio.sleep(seconds)
        after = await remaining(store)
        elapsed = time.monotonic() - began
        cpu_used = [
            end - start
            for end, start in zip(
                [cpu_seconds(p.pid) for p in procs] + [time.process_time()],
                cpu_began,
                strict=True,
            )
        ]
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
                ["serve", "worker", "bench"] if split else ["serve", "bench"], cpu_used, strict=True
            )
        ),
    )


def percentiles(seconds: list[float]) -> str:
    ms = sorted(x * 1000 for x in seconds)
    p95 = ms[min(len(ms) - 1, math.ceil(len(ms) * 0.95) - 1)]
    return f"p50 {statistics.median(ms):.0f} / p95 {p95:.0f} ms"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--drain", type=int, default=100_000, help="no-op jobs per phase")
    parser.add_argument(
        "--no-stats", action="store_true", help="list routes only (no /api/v1/stats)"
    )
    args = parser.parse_args()
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        url, schema = await new_store_url(args.store, Path(tmp))
        store = open_store(url)
        await store.open()
        try:
            small = min(1000, args.backlog)
            await enqueue(store, LATER, small, run_at=tomorrow())
            print(await route_costs(store, small))
            await enqueue(store, LATER, args.backlog - small, run_at=tomorrow(), first=small)
            print(await route_costs(store, args.backlog))
            routes = LIST_ROUTES if args.no_stats else [*LIST_ROUTES, STATS_ROUTE]
            print(
                f"{args.store}: {args.backlog} jobs due tomorrow, {args.drain} no-op jobs a phase,"
                f" routes: {', '.join(sorted({p for p, _ in routes}))}"
            )
            results = []
            for name, clients, split in (
                ("one process, no API load", 0, False),
                (f"one process, {args.clients} clients", args.clients, False),
                ("API and worker processes, no API load", 0, True),
                (f"API and worker processes, {args.clients} clients", args.clients, True),
            ):
                logs = Path(tmp) / f"phase{len(results)}"
                logs.mkdir()
                result = await phase(
                    name, store, url, args.drain, args.seconds, (clients, routes), split, logs
                )
                results.append(result)
                await drain_rest(store, url, logs / "drain.log")
                dry = " (ran dry: raise --drain)" if result.ran_dry else ""
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
        finally:
            await store.close()
            await drop_schema(schema)
    for loaded, idle in ((1, 0), (3, 2)):
        ratio = results[loaded].jobs_per_s / max(results[idle].jobs_per_s, 1e-9)
        print(f"{results[loaded].name}: {ratio:.2f}x of {results[idle].name}")
    load_end = os.getloadavg()
    first, last = (" ".join(f"{x:.2f}" for x in load) for load in (load_start, load_end))
    print(f"load average at start {first}, at end {last} ({os.cpu_count()} cores)")


def tomorrow() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC) + timedelta(days=1)


async def new_store_url(kind: str, tmp: Path) -> tuple[str, str | None]:
    """A new empty store's URL: a SQLite file in `tmp`, or a fresh schema of the
    PostgreSQL bench database (`bench/pg_common.py`; dropped at the end)."""
    if kind == "sqlite":
        return f"sqlite:///{tmp / 'admin-load.db'}", None
    schema = f"bench_admin_{int(time.time())}"
    parts = conninfo_to_dict(await bench_dsn())
    where = f"{parts.get('user', 'postgres')}@{parts.get('host')}:{parts.get('port', 5432)}"
    return f"postgresql://{where}/{parts['dbname']}?schema={schema}", schema


async def drop_schema(schema: str | None) -> None:
    if schema is None:
        return
    async with await psycopg.AsyncConnection.connect(await bench_dsn(), autocommit=True) as conn:
        await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


async def drain_rest(store: Store, url: str, log: Path) -> None:
    """Empty the no-op target between phases (a worker until none are left)."""
    if await remaining(store) == 0:
        return
    proc = start(["worker", "--app", APP], {"JOBLEDGER_STORE": url}, log)
    try:
        while await remaining(store):
            await asyncio.sleep(0.5)
    finally:
        stop([proc])


if __name__ == "__main__":
    asyncio.run(main())
