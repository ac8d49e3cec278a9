"""The chaos harness: real workers, a real broker, a real store, and faults while they run.

`run_chaos(config)` (used by tests/chaos/test_chaos_short.py and bench/chaos.py):

1. a fresh store (PostgreSQL: a database in a *private* cluster the run starts with
   initdb on a free loopback port and removes at the end, tests/private_pg.py, so the
   restart fault never touches a server the run did not start; SQLite: a new file), a
   tansu broker with the two topics behind a loopback proxy that every client goes
   through (tests/chaos/proxy.py: the broker-outage fault), a `Recorder`
   (tests/chaos/record.py) that consumes both topics from the start and keeps every
   record as it arrives, reading again any offset it skipped;
2. N `jobledger worker --app tests.chaos.app:setup` processes (the lane tests'
   `Workers`), with short leases (partition lease 4 s, heartbeat 1 s) and short retry
   delays from the environment;
3. a driver that commits business transactions — one business row plus its enqueue per
   item over `keys` keys with growing versions (few keys: a hot-keys workload where
   consecutive versions of a key are often in flight together) — retrying a transaction
   that failed (the business insert and the dedupe key make the retry idempotent);
4. meanwhile the faults (tests/chaos/faults.py), each recorded with its time and the pods
   it hit;
5. once everything drained, the workers stop and `analyse` (tests/chaos/checks.py)
   checks the record and the log; `replay` must equal the read models, `verify_log` hold.

Fails closed (`Summary.ok`): any problem — a fault that did not inject, a recorder that
did not catch up, a liveness check that could not run — fails the run. A failed run keeps
its evidence (the log, the job rows, the records read, the faults, the workers' logs and,
on PostgreSQL, a pg_dump) in `<workdir>/evidence`, named in the summary.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import logging
import signal
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from jobledger.config.settings import Settings
from jobledger.domain.jobs import JobStatus, NewJob
from jobledger.domain.policies import partition_of
from jobledger.engine import Engine
from jobledger.projections.audit import verify_log
from jobledger.projections.replay import replay
from jobledger.storage.port import Store, native_handle
from jobledger.storage.urls import open_store
from tests.chaos import app as chaos_app
from tests.chaos.acks import Ack, AckIndex, load_acks
from tests.chaos.checks import analyse, check_offsets, read_trails
from tests.chaos.evidence import keep_evidence
from tests.chaos.faults import APP, WORKER_APP_NAME, Faults
from tests.chaos.proxy import broker_behind_proxy
from tests.chaos.record import Delivered, Recorder, create_topics
from tests.chaos.summary import FaultHit, Summary
from tests.integration.test_multiprocess_lanes import Workers
from tests.private_pg import PrivateCluster, private_cluster
from tests.stores import all_jobs

logger = logging.getLogger("jobledger.chaos")


# --- the run's shape --------------------------------------------------------------


def worker_env(bootstrap: str, slots: Path, acks: Path | None = None) -> dict[str, str]:
    """Short leases so takeovers happen within the run; short retries so it drains."""
    return {
        "JOBLEDGER_PARTITION_LEASE_S": "4",
        "JOBLEDGER_HEARTBEAT_S": "1",
        "JOBLEDGER_WORKER_LIVE_S": "3",
        "JOBLEDGER_LONG_LEASE_S": "4",
        "JOBLEDGER_LONG_HEARTBEAT_S": "1",
        "JOBLEDGER_SAFETY_POLL_S": "5",
        "JOBLEDGER_SCHEDULE_TICK_S": "2",
        "JOBLEDGER_PROBE_INTERVAL_S": "1",
        "JOBLEDGER_RETRY_DELAYS_MINUTES": "0.02,0.05,0.1",
        "JOBLEDGER_KAFKA_BOOTSTRAP": bootstrap,
        "JOBLEDGER_KAFKA_CONNECT_TIMEOUT_S": "1",
        "JOBLEDGER_KAFKA_REQUEST_TIMEOUT_S": "2",
        "CHAOS_SLOTS": str(slots),
        **({"CHAOS_ACKS": str(acks)} if acks is not None else {}),
    }


@dataclass
class Config:
    kind: str  # "postgres" | "sqlite"
    jobs: int
    seconds: float  # the fault window; enqueues are spread over its first 75 %
    workdir: Path
    workers: int = 3
    keys: int = 200
    batch: int = 25  # items per business transaction
    kill_every_s: float = 6.0
    terminate_every_s: float = 10.0  # PostgreSQL only
    hangs: int = 2
    hang_s: float = 4.0  # longer than the 2 s Kafka request timeout
    broker_restarts: int = 1
    outages: int = 1  # the broker refusing connections while workers run (the proxy)
    outage_s: float = 5.0  # past the 1 s connect and 2 s request timeouts
    pg_restart: bool = False
    drain_timeout_s: float = 120.0
    seed: int = 7
    app: str = APP


# --- the driver -------------------------------------------------------------------


def job_item(i: int, keys: int) -> tuple[str, int, NewJob]:
    index = i % keys
    key, version = f"k{index:04d}", i // keys + 1
    code = "chaos_amo" if index % 2 == 0 else "chaos_alo"
    target = chaos_app.AMO_TARGET if index % 2 == 0 else chaos_app.ALO_TARGET
    payload = {"key": key, "version": version, "n": i}
    return key, version, NewJob(target, payload, code, key, version, f"chaos:{key}:{version}")


async def create_business_table(store: Store) -> None:
    async with store.writes.transaction() as tx:
        conn = native_handle(tx)
        sql = (
            "CREATE TABLE IF NOT EXISTS chaos_business"
            " (key TEXT NOT NULL, version INTEGER NOT NULL, PRIMARY KEY (key, version))"
        )
        if isinstance(conn, sqlite3.Connection):
            conn.execute(sql)
        else:
            await conn.execute(sql)


async def business_write(tx: Any, rows: list[tuple[str, int]]) -> None:
    """The caller's own rows, on the transaction's connection (idempotent for a retry)."""
    conn = native_handle(tx)
    if isinstance(conn, sqlite3.Connection):
        conn.executemany("INSERT OR IGNORE INTO chaos_business VALUES (?, ?)", rows)
    else:
        async with conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO chaos_business VALUES (%s, %s) ON CONFLICT DO NOTHING", rows
            )


async def business_rows(store: Store) -> set[tuple[str, int]]:
    async with store.writes.transaction() as tx:
        conn = native_handle(tx)
        sql = "SELECT key, version FROM chaos_business"
        if isinstance(conn, sqlite3.Connection):
            return {(k, int(v)) for k, v in conn.execute(sql).fetchall()}
        cur = await conn.execute(sql)
        return {(k, int(v)) for k, v in await cur.fetchall()}


async def drive(engine: Engine, config: Config, summary: Summary) -> float:
    """Commit every job in business transactions, paced over 75 % of the window;
    returns the monotonic time of the last commit."""
    batches = [
        list(range(i, min(i + config.batch, config.jobs)))
        for i in range(0, config.jobs, config.batch)
    ]
    pace = config.seconds * 0.75 / max(len(batches), 1)
    t0 = time.monotonic()
    for n, batch in enumerate(batches):
        delay = t0 + n * pace - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        items = [job_item(i, config.keys) for i in batch]
        while True:
            try:
                async with engine.transaction() as tx:
                    await business_write(tx, [(k, v) for k, v, _ in items])
                    await engine.enqueue_many([job for _, _, job in items], tx=tx)
                break
            except Exception as exc:  # a terminated connection, a restart, a busy file
                summary.driver_retries += 1
                if summary.driver_retries <= 3:
                    logger.warning("driver: transaction failed (%r); retrying", exc)
                await asyncio.sleep(0.3)
    return time.monotonic()


# --- the run ----------------------------------------------------------------------


async def wait_drained(store: Store, driver: asyncio.Task[float], timeout_s: float) -> bool:
    """Every Kafka job closed (delivered or DEAD); schedule rows only while due soon."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if driver.done():
            try:
                jobs = await all_jobs(store)
            except Exception as exc:
                logger.info("drain check failed: %r", exc)
                jobs = None
            if jobs is not None:
                stale = datetime.now(UTC) - timedelta(seconds=30)
                open_rows = [
                    j
                    for j in jobs
                    if j.status != JobStatus.DEAD
                    and (j.target.startswith("kafka:") or j.next_run_at < stale)
                ]
                if not open_rows:
                    return True
        await asyncio.sleep(1.0)
    return False


def read_slot_runs(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


@contextlib.asynccontextmanager
async def fresh_store(
    config: Config,
) -> AsyncIterator[tuple[str, PrivateCluster | None, str]]:
    """(url, private cluster or None, database name) of a new, empty store."""
    if config.kind == "sqlite":
        yield f"sqlite:///{config.workdir / 'jobs.db'}", None, "jobs.db"
        return
    async with private_cluster() as cluster:
        name = f"chaos_{uuid.uuid4().hex[:8]}"
        yield await cluster.create_database(name), cluster, name


async def run_chaos(config: Config) -> Summary:
    summary = Summary(config.kind)
    config.workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    async with fresh_store(config) as (url, cluster, database):
        await _run(config, summary, url, cluster, database)
    summary.wall_s = time.monotonic() - started
    logger.info("chaos summary\n%s", summary.table())
    return summary


def v3_would_miss(
    summary: Summary,
    settled: list[tuple[int, float | None]],
    records: list[Delivered],
    acks: list[Ack],
) -> None:
    """Measured in every run: the records of a restarted broker generation that
    the recorder read only after v3's end-offset condition held. v3 killed the broker
    at that moment, so they would have been missing from the record; one acknowledged to
    a worker would have been reported lost."""
    acked = {(a.job, a.topic, a.partition, a.offset) for a in acks}
    for generation, at in settled:
        if at is None:
            summary.v3_unsettled += 1
            continue
        late = [r for r in records if r.generation == generation and r.seen_at > at]
        summary.v3_missed += len(late)
        summary.v3_missed_acked += sum(
            (r.event_id, r.topic, r.partition, r.offset) in acked for r in late
        )


def takeover_times(hits: list[FaultHit], acks: list[Ack], records: list[Delivered]) -> list[float]:
    """Per kill whose victim held partitions: the time from the kill to the first record
    of one of those partitions that a surviving worker sent (its acknowledgement, logged
    by the sender, after the victim was gone). A kill after which none of its partitions
    had anything to send measures nothing."""
    keys = {r.event_id: r.key for r in records if r.event_id is not None}
    sent = sorted((ack.at, partition_of(keys[ack.job], ack.job)) for ack in acks if ack.job in keys)
    times: list[float] = []
    for hit in hits:
        if hit.name != "kill" or not hit.partitions:
            continue
        gone = hit.until.timestamp()
        start = bisect.bisect_right(sent, (gone, 64))
        first = next((at for at, p in sent[start:] if p in hit.partitions), None)
        if first is not None:
            times.append(first - hit.at.timestamp())
    return times


def recovery_times(hits: list[FaultHit], records: list[Delivered]) -> dict[str, list[float]]:
    """For each fault, by kind: the time from its end to the next record read from the
    topics."""
    seen = sorted(r.seen_at for r in records)
    out: dict[str, list[float]] = {}
    for hit in hits:
        end = hit.until.timestamp()
        at = bisect.bisect_right(seen, end)
        if at < len(seen):
            out.setdefault(hit.name, []).append(seen[at] - end)
    return out


async def _run(
    config: Config, summary: Summary, url: str, cluster: PrivateCluster | None, database: str
) -> None:
    slots_file = config.workdir / "slots.jsonl"
    acks_file = config.workdir / "acks.jsonl"
    async with broker_behind_proxy(config.workdir) as (broker, proxy):
        await create_topics(proxy.bootstrap)
        worker_url = (
            url + f"?application_name={WORKER_APP_NAME}" if config.kind == "postgres" else url
        )
        workers = Workers(worker_url, config.workdir / "unused.jsonl", 0.0)
        workers.env.update(worker_env(proxy.bootstrap, slots_file, acks_file))
        store = open_store(url)
        await store.open()
        engine = Engine(store, settings=Settings(kafka_bootstrap=proxy.bootstrap))
        chaos_app.setup(engine)
        recorder = Recorder(proxy.bootstrap)
        faults = Faults(config, workers, broker, recorder, cluster, database, summary, proxy, store)
        driver: asyncio.Task[float] | None = None
        try:
            await create_business_table(store)
            recorder.start()
            for _ in range(config.workers):
                faults.spawn()
            driver = asyncio.create_task(drive(engine, config, summary))
            await faults.run()
            drained = await wait_drained(store, driver, config.drain_timeout_s)
            last_commit = await driver if driver.done() else time.monotonic()
            summary.drain_s = time.monotonic() - last_commit
            if not drained:
                await report_open(summary, store, config)
            faults.check_crashes()
            await faults.check_live(store)
            stopping = datetime.now(UTC)
            final = [p for p in workers.procs if p.pid not in faults.killed]
            codes = workers.stop_all()
            faults.check_outages()
            for proc, code in zip(workers.procs, codes, strict=True):
                if proc in final and code != 0:
                    summary.crashes += 1
                    summary.problem(
                        f"worker {faults.names[proc.pid]} {faults.stop_failure(proc, code)}"
                    )
            if not await recorder.quiesced(30, proxy.produce_idle):
                summary.problem("recorder did not catch up after the drain")
            summary.fences = recorder.fences_written
            check_offsets(summary, recorder)
            acks = load_acks(acks_file)
            summary.acks_logged = len(acks)
            trails, declared = await read_trails(store)
            window = (declared, stopping - timedelta(seconds=15)) if declared else None
            analyse(
                summary,
                await business_rows(store),
                trails,
                recorder.in_broker_order(),
                window,
                read_slot_runs(slots_file),
                faults.hits,
                AckIndex(acks, recorder.records),
            )
            v3_would_miss(summary, faults.v3_settled, recorder.records, acks)
            summary.recovery_s = recovery_times(faults.hits, recorder.records)
            summary.takeover_s = takeover_times(faults.hits, acks, recorder.records)
            report = await replay(store)
            summary.projection_diffs = len(report.differences) + len(report.problems)
            for line in report.lines()[1:-1]:
                summary.problem(f"replay: {line}")
            verified = await verify_log(store)
            summary.chain_problems = len(verified.problems)
            for line in verified.problems[:5]:
                summary.problem(f"verify: {line}")
        except Exception as exc:
            summary.problem(f"the run itself failed: {exc!r}")
            raise
        finally:
            if driver is not None and not driver.done():
                driver.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await driver
            for proc in workers.procs:  # a worker left stopped by a failed fault
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.send_signal(signal.SIGCONT)
            workers.stop_all()
            if not summary.ok:
                await keep_evidence(
                    summary, store, recorder, faults, cluster, database, config.workdir
                )
            await recorder.stop()
            await store.close()


async def report_open(summary: Summary, store: Store, config: Config) -> None:
    summary.problem(f"not drained within {config.drain_timeout_s:.0f}s")
    # who holds the open rows' partitions now (the dump is taken after every pod
    # released its leases on SIGTERM, so only this snapshot shows a stuck owner)
    now = datetime.now(UTC)
    open_partitions = {
        job.partition
        for job in await all_jobs(store)
        if job.status != JobStatus.DEAD and job.target.startswith("kafka:")
    }
    live = set(await store.coordination.live_workers(now - timedelta(seconds=30)))
    for lease in await store.coordination.leases():
        if lease.partition in open_partitions:
            summary.problem(
                f"lease of open partition {lease.partition}: owner={lease.owner}"
                f" (live={lease.owner in live}) until={lease.lease_until}"
            )
    for job in await all_jobs(store):
        if job.status != JobStatus.DEAD and job.target.startswith("kafka:"):
            summary.problem(
                f"open: {job.dedupe_key} {job.status} attempts={job.attempts}"
                f" next_run_at={job.next_run_at:%H:%M:%S} p={job.partition}"
                f" inflight={job.inflight_token} error={job.last_error!r:.120}"
            )
