"""The chaos harness: real workers, a real broker, a real store, and faults while they run.

`run_chaos(config)` (used by tests/chaos/test_chaos_short.py and bench/chaos.py):

1. a fresh store (PostgreSQL: a new database, via the multi-process lane tests'
   `store_url`; SQLite: a new file), a tansu broker with the two topics, a `Recorder`
   that consumes both topics from the start and keeps every record as it arrives;
2. N `jobledger worker --app tests.chaos.app:setup` processes (the lane tests'
   `Workers`), with short leases (partition lease 4 s, heartbeat 1 s) and short retry
   delays from the environment;
3. a driver that commits business transactions — one business row plus its enqueue per
   item, many keys, growing versions — spread over the run, retrying a transaction that
   failed (the business insert and the dedupe key make the retry idempotent);
4. meanwhile the faults, in time order: SIGKILL a random worker and start a new one;
   `pg_terminate_backend` of every worker backend; SIGSTOP/SIGCONT the broker (a hang
   longer than the Kafka request timeout); kill + restart the broker on the same port;
   restart PostgreSQL. tansu keeps topics in memory, so before the broker is killed every
   worker is stopped (SIGSTOP — a stall past the lease, itself a fault) until the
   recorder has read up to the topics' end offsets: nothing acknowledged is lost from
   the record by the restart, and the workers' own connections still die;
5. once everything drained, the workers stop and `analyse` checks the record and the log:
   nothing lost, at-most-once ≤ 1 delivery, at-least-once ≥ 1, per-key order, one job per
   schedule slot, `replay` equals the read models, `verify_log` holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import signal
import sqlite3
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from jobledger.config.settings import Settings
from jobledger.domain.events import Event, EventType
from jobledger.domain.jobs import JobStatus, NewJob
from jobledger.domain.timeutil import parse_iso
from jobledger.engine import Engine
from jobledger.projections.audit import verify_log
from jobledger.projections.log import pages
from jobledger.projections.replay import replay
from jobledger.storage.port import Store, native_handle
from jobledger.storage.urls import open_store
from tests.chaos import app as chaos_app
from tests.integration.test_multiprocess_lanes import Workers, store_url
from tests.tansu import Tansu, create_topic

logger = logging.getLogger("jobledger.chaos")

APP = "tests.chaos.app:setup"
TOPICS = (chaos_app.AMO_TOPIC, chaos_app.ALO_TOPIC)
TOPIC_PARTITIONS = 4
WORKER_APP_NAME = "chaos-worker"  # application_name of the workers' PostgreSQL backends
PG_RESTART = ["pg_ctlcluster", "--skip-systemctl-redirect", "15", "main", "restart"]
CLOSED = (
    EventType.JOB_SUCCEEDED,
    EventType.JOB_DEAD,
    EventType.JOB_SKIPPED,
    EventType.JOB_CANCELLED,
    EventType.JOB_EXPIRED,
)


def worker_env(bootstrap: str, slots: Path) -> dict[str, str]:
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
    pg_restart: bool = False
    drain_timeout_s: float = 120.0
    seed: int = 7


@dataclass
class Delivered:
    topic: str
    partition: int
    offset: int
    generation: int  # broker life (a restarted tansu starts empty)
    key: str | None
    event_id: str | None
    value: Any


@dataclass
class Summary:
    kind: str
    jobs: int = 0  # committed business rows (one job each)
    enqueued: int = 0
    delivered: int = 0  # records on the topics
    succeeded: int = 0
    dead: Counter[str] = field(default_factory=Counter)  # reason → jobs
    kills: int = 0
    crashes: int = 0  # workers that exited without being killed, or hung
    boot_exits: int = 0  # exited 1 because App.start failed (e.g. store down > 30 s)
    boot_hangs: int = 0  # the known bug: App.start failed, the process hangs (Findings)
    pg_terminations: int = 0
    pg_restarts: int = 0
    broker_hangs: int = 0
    broker_restarts: int = 0
    driver_retries: int = 0  # business transactions that failed and were retried
    lost: int = 0
    amo_duplicates: int = 0
    alo_duplicates: int = 0  # allowed: resends share event_id
    alo_undelivered: int = 0
    order_violations: int = 0
    slots: int = 0
    slot_errors: int = 0
    slot_reruns: int = 0  # a reclaimed slot runs again (long lane is at-least-once)
    projection_diffs: int = 0
    chain_problems: int = 0
    wall_s: float = 0.0
    drain_s: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.amo_duplicates
            or self.alo_undelivered
            or self.order_violations
            or self.slot_errors
            or self.projection_diffs
            or self.chain_problems
            or self.crashes
            or self.jobs == 0
        )

    def problem(self, text: str) -> None:
        if len(self.problems) < 50:
            self.problems.append(text)

    def table(self) -> str:
        dead = ", ".join(f"{n} {r}" for r, n in self.dead.most_common()) or "0"
        rows = [
            ("store", self.kind),
            ("jobs (committed business rows)", self.jobs),
            ("jobs enqueued (JobEnqueued)", self.enqueued),
            ("records on the topics", self.delivered),
            ("succeeded", self.succeeded),
            ("DEAD, by reason", dead),
            ("worker SIGKILLs (+ restarts)", self.kills),
            ("worker crashes (not killed by us)", self.crashes),
            ("workers exiting 1 after a failed boot", self.boot_exits),
            ("workers hung after a failed boot (known bug)", self.boot_hangs),
            ("pg_terminate_backend rounds", self.pg_terminations),
            ("PostgreSQL restarts", self.pg_restarts),
            ("broker hangs (SIGSTOP/SIGCONT)", self.broker_hangs),
            ("broker kill + restart", self.broker_restarts),
            ("driver transactions retried", self.driver_retries),
            ("lost", self.lost),
            ("at-most-once duplicates", self.amo_duplicates),
            ("at-least-once duplicates (allowed)", self.alo_duplicates),
            ("at-least-once undelivered", self.alo_undelivered),
            ("order violations", self.order_violations),
            ("schedule slots checked", self.slots),
            ("slot errors", self.slot_errors),
            ("slot handler reruns (allowed)", self.slot_reruns),
            ("projection diffs (replay)", self.projection_diffs),
            ("hash-chain problems", self.chain_problems),
            ("wall time (s)", f"{self.wall_s:.0f}"),
            ("drain after the last enqueue (s)", f"{self.drain_s:.0f}"),
            ("verdict", "PASS" if self.ok else "FAIL"),
        ]
        width = max(len(name) for name, _ in rows)
        lines = [f"| {'check'.ljust(width)} | result |", f"|{'-' * (width + 2)}|--------|"]
        lines += [f"| {name.ljust(width)} | {value} |" for name, value in rows]
        return "\n".join(lines + [f"problem: {p}" for p in self.problems])


# --- the recorder ---------------------------------------------------------------------


class Recorder:
    """Consumes both topics from the start, keeping every record in arrival order.

    `new_generation()` after a broker restart: the topics are new, offsets start at 0.
    """

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.records: list[Delivered] = []
        self.generation = 0
        self.next_offset: dict[tuple[str, int], int] = {}
        self._consumer: Any = None
        self._task: asyncio.Task[None] | None = None
        self._running = asyncio.Event()

    def start(self) -> None:
        self._running.set()
        self._task = asyncio.create_task(self._run(), name="chaos-recorder")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._close()

    async def suspend(self) -> None:
        self._running.clear()
        await self._close()

    def new_generation(self) -> None:
        self.generation += 1
        self.next_offset.clear()
        self._running.set()

    async def _close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                await consumer.stop()

    async def _open(self) -> Any:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            request_timeout_ms=5000,
        )
        await consumer.start()
        try:
            await consumer.topics()
            tps = [
                TopicPartition(t, p)
                for t in TOPICS
                for p in sorted(consumer.partitions_for_topic(t) or ())
            ]
            if len(tps) != len(TOPICS) * TOPIC_PARTITIONS:
                raise RuntimeError(f"topics not ready: {tps}")
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, self.next_offset.get((tp.topic, tp.partition), 0))
        except BaseException:
            with contextlib.suppress(Exception):
                await consumer.stop()
            raise
        return consumer

    async def _run(self) -> None:
        while True:
            await self._running.wait()
            try:
                if self._consumer is None:
                    self._consumer = await self._open()
                batch = await self._consumer.getmany(timeout_ms=200)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # broker hung, gone or restarting: open again
                logger.info("recorder: %r; reopening", exc)
                await self._close()
                await asyncio.sleep(0.5)
                continue
            if not self._running.is_set():
                continue  # suspended meanwhile (a broker restart): these belong to no one
            for tp, records in batch.items():
                for r in records:
                    key = (tp.topic, tp.partition)
                    if r.offset < self.next_offset.get(key, 0):
                        continue
                    self.next_offset[key] = r.offset + 1
                    headers = {k: v.decode() for k, v in (r.headers or ())}
                    self.records.append(
                        Delivered(
                            tp.topic,
                            tp.partition,
                            r.offset,
                            self.generation,
                            r.key.decode() if r.key is not None else None,
                            headers.get("event_id"),
                            json.loads(r.value) if r.value else None,
                        )
                    )

    async def caught_up(self, timeout_s: float) -> bool:
        """Wait until every partition was read up to its end offset (as of each check)."""
        from aiokafka import TopicPartition

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            consumer = self._consumer
            if consumer is not None:
                try:
                    tps = [TopicPartition(t, p) for t in TOPICS for p in range(TOPIC_PARTITIONS)]
                    ends = await asyncio.wait_for(consumer.end_offsets(tps), 5)
                    if all(
                        self.next_offset.get((tp.topic, tp.partition), 0) >= end
                        for tp, end in ends.items()
                    ):
                        return True
                except Exception as exc:
                    logger.info("recorder end offsets: %r", exc)
            await asyncio.sleep(0.2)
        return False


async def create_topics(bootstrap: str) -> None:
    for topic in TOPICS:
        with contextlib.suppress(Exception):  # already there (a producer auto-created it)
            await create_topic(bootstrap, topic, TOPIC_PARTITIONS)


# --- the driver -----------------------------------------------------------------------


def job_item(i: int, keys: int) -> tuple[str, int, NewJob]:
    index = i % keys
    key, version = f"k{index:04d}", i // keys + 1
    code = "chaos_amo" if index % 2 == 0 else "chaos_alo"
    target = chaos_app.AMO_TARGET if index % 2 == 0 else chaos_app.ALO_TARGET
    payload = {"key": key, "version": version, "n": i}
    return key, version, NewJob(target, payload, code, key, version, f"chaos:{key}:{version}")


async def create_business_table(store: Store) -> None:
    async with store.transaction() as tx:
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
    async with store.transaction() as tx:
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


# --- the faults -----------------------------------------------------------------------


class Faults:
    def __init__(
        self,
        config: Config,
        workers: Workers,
        broker: Tansu,
        recorder: Recorder,
        url: str,
        summary: Summary,
    ) -> None:
        self.config = config
        self.workers = workers
        self.broker = broker
        self.recorder = recorder
        self.url = url
        self.summary = summary
        self.rng = random.Random(config.seed)
        self.killed: set[int] = set()
        self.spawned = 0
        self.names: dict[int, str] = {}  # pid → pod id

    def spawn(self) -> None:
        name = f"w{self.spawned}"
        self.spawned += 1
        proc = self.workers.spawn(name, self.config.workdir / f"{name}.log", app=APP)
        self.names[proc.pid] = name

    async def check_live(self, store: Store, timeout_s: float = 20.0) -> None:
        """Every worker still running must heartbeat: one that is up but silent (it
        failed its boot and hangs, see docs/reliability.md) is counted as a crash."""
        deadline = time.monotonic() + timeout_s
        missing: list[str] = []
        while time.monotonic() < deadline:
            since = datetime.now(UTC) - timedelta(seconds=3)
            with contextlib.suppress(Exception):
                live = set(await store.live_workers(since))
                missing = [self.names[p.pid] for p in self.live() if self.names[p.pid] not in live]
                if not missing:
                    return
            await asyncio.sleep(0.5)
        for name in missing:
            if self.failed_boot(name):
                self.summary.boot_hangs += 1
                self.summary.problem(
                    f"worker {name}: App.start failed and the process hangs"
                    " (known bug, tests/chaos/test_boot_fault.py)"
                )
            else:
                self.summary.crashes += 1
                self.summary.problem(f"worker {name} is running but never heartbeats (hung)")

    def failed_boot(self, name: str) -> bool:
        """The worker's log shows an error raised out of `App.start()`."""
        log = self.config.workdir / f"{name}.log"
        return log.exists() and "await app.start()" in log.read_text(errors="replace")

    def stop_failure(self, proc: subprocess.Popen[bytes], code: int | None) -> str:
        """How a worker failed its SIGTERM stop, in the words of the summary."""
        if code is None:
            return "did not exit within 20 s of SIGTERM (killed)"
        log = self.config.workdir / f"{self.names[proc.pid]}.log"
        if log.exists() and "stop not finished within" in log.read_text(errors="replace"):
            return f"stopped with {code} on SIGTERM: its stop was cut short at stop_timeout_s"
        return f"stopped with {code} on SIGTERM"

    def live(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.workers.procs if p.poll() is None]

    def check_crashes(self) -> None:
        """A worker that exited on its own is a finding: count it and replace it."""
        for proc in self.workers.procs:
            if proc.poll() is not None and proc.pid not in self.killed:
                self.killed.add(proc.pid)
                name = self.names[proc.pid]
                if proc.returncode == 1 and self.failed_boot(name):
                    self.summary.boot_exits += 1
                    self.summary.problem(f"worker {name} exited 1: App.start failed (see its log)")
                else:
                    self.summary.crashes += 1
                    self.summary.problem(f"worker {name} exited with {proc.returncode}")
                self.spawn()

    async def kill_one(self) -> None:
        victim = self.rng.choice(self.live())
        self.killed.add(victim.pid)
        victim.send_signal(signal.SIGKILL)
        await asyncio.to_thread(victim.wait, 10)
        self.summary.kills += 1
        self.spawn()

    async def terminate_backends(self) -> None:
        import psycopg

        from tests.factories.postgres import dsn

        dbname = self.url.rsplit("/", 1)[1].split("?", 1)[0]
        async with await psycopg.AsyncConnection.connect(dsn(), autocommit=True) as conn:
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND application_name = %s",
                (dbname, WORKER_APP_NAME),
            )
        self.summary.pg_terminations += 1

    async def hang_broker(self) -> None:
        self.broker.freeze()
        await asyncio.sleep(self.config.hang_s)
        self.broker.thaw()
        self.summary.broker_hangs += 1

    async def restart_broker(self) -> None:
        """Stall every worker, let the recorder read everything, kill the broker, start an
        empty one on the same port, wake the workers."""
        stalled = self.live()
        for proc in stalled:
            proc.send_signal(signal.SIGSTOP)
        try:
            await asyncio.sleep(0.5)  # requests already written reach the broker
            if not await self.recorder.caught_up(30):
                self.summary.problem("recorder did not catch up before the broker restart")
            await self.recorder.suspend()
            self.broker.kill()
            await asyncio.sleep(1.0)
            await self.broker.start()
            await create_topics(self.broker.bootstrap)
            self.recorder.new_generation()
        finally:
            for proc in stalled:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGCONT)
        self.summary.broker_restarts += 1

    async def restart_postgres(self) -> None:
        proc = await asyncio.create_subprocess_exec(
            *PG_RESTART, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
        )
        _, err = await proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"PostgreSQL restart failed: {err.decode(errors='replace')}")
        self.summary.pg_restarts += 1

    def plan(self) -> list[tuple[float, str, Callable[[], Awaitable[None]]]]:
        c, end = self.config, self.config.seconds * 0.85
        steps: list[tuple[float, str, Callable[[], Awaitable[None]]]] = []
        t = c.kill_every_s
        while t < end:
            steps.append((t, "kill", self.kill_one))
            t += c.kill_every_s
        if c.kind == "postgres":
            t = c.terminate_every_s / 2 + 1
            while t < end:
                steps.append((t, "terminate", self.terminate_backends))
                t += c.terminate_every_s
            if c.pg_restart:
                steps.append((c.seconds * 0.6, "pg restart", self.restart_postgres))
        for n in range(c.hangs):
            steps.append(
                (c.seconds * (0.25 + 0.45 * n / max(c.hangs - 1, 1)), "hang", self.hang_broker)
            )
        for n in range(c.broker_restarts):
            steps.append((c.seconds * (0.45 + 0.1 * n), "broker restart", self.restart_broker))
        return sorted(steps, key=lambda s: s[0])

    async def run(self) -> None:
        t0 = time.monotonic()
        for at, name, action in self.plan():
            delay = t0 + at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            self.check_crashes()
            logger.info("chaos t=%.1fs: %s", time.monotonic() - t0, name)
            try:
                await action()
            except Exception as exc:  # a fault that could not be injected is reported
                self.summary.problem(f"fault {name} at {at:.0f}s failed: {exc!r}")
        self.check_crashes()


# --- the checks -----------------------------------------------------------------------


@dataclass
class JobTrail:
    target: str
    key: str | None
    version: int
    dedupe_key: str
    payload: Any
    closed: str | None = None  # the closing event type
    reason: str | None = None


async def read_trails(store: Store) -> tuple[dict[str, JobTrail], datetime | None]:
    """Every job's enqueue and closing event, and when the schedule was first declared."""
    trails: dict[str, JobTrail] = {}
    declared: datetime | None = None
    async for events in pages(store):
        for event in events:
            fold(trails, event)
            if event.type == EventType.SCHEDULE_DECLARED and declared is None:
                declared = event.at
    return trails, declared


def fold(trails: dict[str, JobTrail], event: Event) -> None:
    if not event.stream.startswith("job:"):
        return
    job_id = event.stream.removeprefix("job:")
    data = event.data
    if event.type == EventType.JOB_ENQUEUED:
        trails[job_id] = JobTrail(
            data["target"],
            data.get("key"),
            data.get("version", 0),
            data["dedupe_key"],
            data.get("payload"),
        )
    elif event.type in CLOSED and job_id in trails:
        trails[job_id].closed, trails[job_id].reason = event.type, data.get("reason")
    elif event.type == EventType.JOB_RETRIED and job_id in trails:
        trails[job_id].closed = trails[job_id].reason = None


def analyse(
    summary: Summary,
    business: set[tuple[str, int]],
    trails: dict[str, JobTrail],
    records: list[Delivered],
    slot_window: tuple[datetime, datetime] | None,
    slot_runs: list[dict[str, Any]],
) -> None:
    kafka = {i: t for i, t in trails.items() if t.target.startswith("kafka:")}
    summary.jobs, summary.enqueued, summary.delivered = len(business), len(kafka), len(records)
    by_dedupe = {t.dedupe_key: i for i, t in kafka.items()}
    for key, version in sorted(business):
        if f"chaos:{key}:{version}" not in by_dedupe:
            summary.lost += 1
            summary.problem(f"lost: business row {key} v{version} committed, no JobEnqueued")
    for trail in kafka.values():
        _, bkey, bversion = trail.dedupe_key.split(":")
        if (bkey, int(bversion)) not in business:
            summary.lost += 1
            summary.problem(f"JobEnqueued {trail.dedupe_key} without its business row")
    count = Counter(r.event_id for r in records)
    for job_id, trail in kafka.items():
        amo = trail.target == chaos_app.AMO_TARGET
        if trail.closed == EventType.JOB_SUCCEEDED:
            summary.succeeded += 1
            if count[job_id] == 0:
                summary.lost += 1
                summary.problem(f"lost: {job_id} ({trail.dedupe_key}) succeeded, not on the topic")
        elif trail.closed == EventType.JOB_DEAD:
            summary.dead[trail.reason or "NO REASON"] += 1
            if not trail.reason:
                summary.lost += 1
                summary.problem(f"lost: {job_id} DEAD without a reason")
            if not amo:
                summary.alo_undelivered += 1
                summary.problem(f"at-least-once {job_id} DEAD ({trail.reason})")
        elif trail.closed is not None:
            summary.lost += 1
            summary.problem(f"lost: {job_id} closed by {trail.closed} ({trail.reason})")
        else:
            summary.lost += 1
            summary.problem(f"lost: {job_id} ({trail.dedupe_key}) still open after the drain")
        if amo and count[job_id] > 1:
            summary.amo_duplicates += 1
            summary.problem(f"at-most-once {job_id} delivered {count[job_id]}x")
        if not amo:
            summary.alo_duplicates += max(count[job_id] - 1, 0)
            if count[job_id] == 0 and trail.closed != EventType.JOB_DEAD:
                summary.alo_undelivered += 1
    # per key: versions in first-delivery order strictly increase; records match their job
    seen: set[str] = set()
    newest: dict[str, int] = {}
    for r in records:
        sent = kafka.get(r.event_id or "")
        if sent is None or r.key != sent.key or r.value != sent.payload:
            summary.order_violations += 1
            summary.problem(f"record {r.topic}/{r.partition}@{r.offset} matches no job: {r.key}")
            continue
        if r.event_id in seen:
            continue
        seen.add(r.event_id or "")
        if sent.version <= newest.get(sent.key or "", 0):
            summary.order_violations += 1
            summary.problem(
                f"order: {sent.key} v{sent.version} first delivered after v{newest[sent.key or '']}"
            )
        newest[sent.key or ""] = max(sent.version, newest.get(sent.key or "", 0))
    check_slots(summary, trails, slot_window, slot_runs)


def check_slots(
    summary: Summary,
    trails: dict[str, JobTrail],
    window: tuple[datetime, datetime] | None,
    runs: list[dict[str, Any]],
) -> None:
    """Exactly one job per minute slot that passed while workers ran, each closed by
    JobSucceeded (or JobSkipped with a reason)."""
    prefix = f"{chaos_app.SCHEDULE}:"
    per_slot: dict[datetime, list[JobTrail]] = defaultdict(list)
    for trail in trails.values():
        if trail.target == f"schedule:{chaos_app.SCHEDULE}":
            per_slot[parse_iso(trail.dedupe_key.removeprefix(prefix))].append(trail)
    if window is None:
        summary.slot_errors += 1
        summary.problem("the schedule was never declared")
        return
    start, end = window
    slot = start.replace(second=0, microsecond=0) + timedelta(minutes=1)
    while slot <= end:
        summary.slots += 1
        jobs = per_slot.get(slot, [])
        ok = len(jobs) == 1 and (
            jobs[0].closed == EventType.JOB_SUCCEEDED
            or (jobs[0].closed == EventType.JOB_SKIPPED and jobs[0].reason)
        )
        if not ok:
            summary.slot_errors += 1
            summary.problem(f"slot {slot.isoformat()}: {[(j.closed, j.reason) for j in jobs]}")
        slot += timedelta(minutes=1)
    summary.slot_reruns = sum(n - 1 for n in Counter(r["slot"] for r in runs).values())


# --- the run --------------------------------------------------------------------------


async def wait_drained(store: Store, driver: asyncio.Task[float], timeout_s: float) -> bool:
    """Every Kafka job closed (delivered or DEAD); schedule rows only while due soon."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if driver.done():
            try:
                jobs = await store.all_jobs()
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


async def run_chaos(config: Config) -> Summary:
    summary = Summary(config.kind)
    config.workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    slots_file = config.workdir / "slots.jsonl"
    database = contextlib.AsyncExitStack()
    url = await database.enter_async_context(store_url(config.kind, config.workdir))
    try:
        await _run(config, summary, url, slots_file)
    finally:
        try:
            await database.aclose()
        except Exception as exc:  # e.g. another suite dropped the database we connect from
            summary.problem(
                f"dropping the run's database failed ({exc!r}); dropped via {dsn_name()}"
            )
            if config.kind == "postgres":
                await drop_database(url)
    summary.wall_s = time.monotonic() - started
    logger.info("chaos summary\n%s", summary.table())
    return summary


def dsn_name() -> str:
    from tests.factories.postgres import dsn

    return dsn()


async def drop_database(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    async with await psycopg.AsyncConnection.connect(dsn_name(), autocommit=True) as conn:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _run(config: Config, summary: Summary, url: str, slots_file: Path) -> None:
    async with Tansu.running(config.workdir) as broker:
        await create_topics(broker.bootstrap)
        worker_url = (
            url + f"?application_name={WORKER_APP_NAME}" if config.kind == "postgres" else url
        )
        workers = Workers(worker_url, config.workdir / "unused.jsonl", 0.0)
        workers.env.update(worker_env(broker.bootstrap, slots_file))
        store = open_store(url)
        await store.open()
        engine = Engine(store, settings=Settings(kafka_bootstrap=broker.bootstrap))
        chaos_app.setup(engine)
        recorder = Recorder(broker.bootstrap)
        faults = Faults(config, workers, broker, recorder, url, summary)
        slot_window: tuple[datetime, datetime] | None = None
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
                summary.problem(f"not drained within {config.drain_timeout_s:.0f}s")
                for job in await store.all_jobs():
                    if job.status != JobStatus.DEAD and job.target.startswith("kafka:"):
                        summary.problem(
                            f"open: {job.dedupe_key} {job.status} attempts={job.attempts}"
                            f" next_run_at={job.next_run_at:%H:%M:%S} p={job.partition}"
                            f" inflight={job.inflight_token} error={job.last_error!r:.120}"
                        )
            faults.check_crashes()
            await faults.check_live(store)
            stopping = datetime.now(UTC)
            final = [p for p in workers.procs if p.pid not in faults.killed]
            codes = workers.stop_all()
            for proc, code in zip(workers.procs, codes, strict=True):
                if proc in final and code != 0:
                    summary.crashes += 1
                    summary.problem(
                        f"worker {faults.names[proc.pid]} {faults.stop_failure(proc, code)}"
                    )
            if not await recorder.caught_up(30):
                summary.problem("recorder did not catch up after the drain")
            trails, declared = await read_trails(store)
            if declared is not None:
                slot_window = (declared, stopping - timedelta(seconds=15))
            analyse(
                summary,
                await business_rows(store),
                trails,
                recorder.records,
                slot_window,
                read_slot_runs(slots_file),
            )
            report = await replay(store)
            summary.projection_diffs = len(report.differences) + len(report.problems)
            for line in report.lines()[1:-1]:
                summary.problem(f"replay: {line}")
            verified = await verify_log(store)
            summary.chain_problems = len(verified.problems)
            for line in verified.problems[:5]:
                summary.problem(f"verify: {line}")
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
            await recorder.stop()
            await store.close()
