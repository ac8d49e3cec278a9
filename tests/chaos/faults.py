"""The faults a chaos run injects, each recorded as a `FaultHit` and each failing closed.

SIGKILL a random worker (and start a new one); `pg_terminate_backend` of every worker
backend (a round that ended no connection is a problem: the fault did not inject);
SIGSTOP/SIGCONT the broker (a hang longer than the Kafka request timeout); a broker
outage while the workers run (the loopback proxy every client reaches the broker through,
tests/chaos/proxy.py, stops listening and cuts every connection: connects are refused);
kill and restart the broker on the same port; restart PostgreSQL — the harness's
*private* cluster (tests/private_pg.py), never a server it did not start.

tansu keeps topics in memory, so before the broker is killed every worker is stopped
(SIGSTOP, itself a stall past the lease) and the recorder waits for a condition: the
proxy has no Produce request unanswered and the recorder has read a fence record written
to every partition after that (`Recorder.quiesced`; tansu's end offsets cannot be
trusted for this, see tests/integration/test_tansu_offsets.py).
The outage needs no such care: the broker itself keeps running behind the proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from jobledger.storage.port import Store
from tests.chaos.record import Recorder, create_topics
from tests.chaos.summary import FaultHit, Summary
from tests.integration.test_multiprocess_lanes import Workers
from tests.tansu import Tansu

if TYPE_CHECKING:
    from tests.chaos.harness import Config
    from tests.chaos.proxy import LoopbackProxy
    from tests.private_pg import PrivateCluster

logger = logging.getLogger("jobledger.chaos")

APP = "tests.chaos.app:setup"
WORKER_APP_NAME = "chaos-worker"  # application_name of the workers' PostgreSQL backends
#: how long a connection-kill round waits for a worker connection to be open
TERMINATE_WAIT_S = 5.0
Step = tuple[float, str, Callable[[], Awaitable[None]]]


def now() -> datetime:
    return datetime.now(UTC)


def process_stopped(pid: int) -> bool:
    """The kernel reports the process stopped (state T) or gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t", "Z", "X")


class Faults:
    def __init__(
        self,
        config: Config,
        workers: Workers,
        broker: Tansu,
        recorder: Recorder,
        cluster: PrivateCluster | None,
        database: str,
        summary: Summary,
        proxy: LoopbackProxy | None = None,
        store: Store | None = None,
    ) -> None:
        self.config = config
        self.proxy = proxy
        self.store = store  # the lease rows a kill's victim held (per-kill takeover)
        self.workers = workers
        self.broker = broker
        self.recorder = recorder
        self.cluster = cluster
        self.database = database
        self.summary = summary
        self.rng = random.Random(config.seed)
        self.killed: set[int] = set()
        self.spawned = 0
        self.names: dict[int, str] = {}  # pid -> pod id
        self.hits: list[FaultHit] = []
        #: per broker restart: (generation, when v3's end-offset condition held, or None)
        self.v3_settled: list[tuple[int, float | None]] = []

    def spawn(self) -> None:
        name = f"w{self.spawned}"
        self.spawned += 1
        proc = self.workers.spawn(name, self.config.workdir / f"{name}.log", app=self.config.app)
        self.names[proc.pid] = name

    async def check_live(self, store: Store, timeout_s: float = 20.0) -> None:
        """Every worker still running must heartbeat. Fails closed: a worker that is up
        but silent is a crash, and a listing that never succeeds is a problem."""
        deadline = time.monotonic() + timeout_s
        missing: list[str] = []
        listed = False
        error: Exception | None = None
        while time.monotonic() < deadline:
            try:
                live = set(await store.coordination.live_workers(now() - timedelta(seconds=3)))
            except Exception as exc:
                error = exc
                await asyncio.sleep(0.5)
                continue
            listed = True
            missing = [self.names[p.pid] for p in self.live() if self.names[p.pid] not in live]
            if not missing:
                return
            await asyncio.sleep(0.5)
        if not listed:
            self.summary.problem(f"liveness not checked: listing live workers failed ({error!r})")
        for name in missing:
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

    async def held_by(self, pod: str) -> frozenset[int]:
        """The partitions whose live lease `pod` holds (none when the read fails)."""
        if self.store is None:
            return frozenset()
        try:
            leases = await self.store.coordination.leases()
        except Exception as exc:  # the store restarting: this kill measures no takeover
            logger.info("lease read before a kill failed: %r", exc)
            return frozenset()
        t = now()
        return frozenset(
            lease.partition
            for lease in leases
            if lease.owner == pod and lease.lease_until is not None and lease.lease_until > t
        )

    async def kill_one(self) -> None:
        victim = self.rng.choice(self.live())
        name = self.names[victim.pid]
        partitions = await self.held_by(name)
        self.killed.add(victim.pid)
        at = now()
        victim.send_signal(signal.SIGKILL)
        await asyncio.to_thread(victim.wait, 10)
        self.hits.append(FaultHit("kill", at, now(), frozenset({name}), partitions))
        self.summary.kills += 1
        self.spawn()

    async def terminate_backends(self) -> None:
        import psycopg

        assert self.cluster is not None
        at = now()
        # Right after another fault (a PostgreSQL restart, every worker just killed) the
        # workers may hold no connection for a moment: try again until one is open, and
        # fail the run only when none appeared within TERMINATE_WAIT_S.
        deadline = asyncio.get_running_loop().time() + TERMINATE_WAIT_S
        killed = 0
        while True:
            conn = await psycopg.AsyncConnection.connect(self.cluster.dsn, autocommit=True)
            async with conn:
                cur = await conn.execute(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))"
                    " FROM pg_stat_activity WHERE datname = %s AND application_name = %s",
                    (self.database, WORKER_APP_NAME),
                )
                row = await cur.fetchone()
            killed = int(row[0]) if row else 0
            if killed or asyncio.get_running_loop().time() >= deadline:
                break
            await asyncio.sleep(0.2)
        self.summary.pg_terminations += 1
        self.summary.pg_connections_killed += killed
        if killed == 0:
            raise RuntimeError("no worker connection was open to terminate")
        self.hits.append(FaultHit("terminate", at, now()))

    async def hang_broker(self) -> None:
        at = now()
        self.broker.freeze()
        await asyncio.sleep(self.config.hang_s)
        self.broker.thaw()
        self.hits.append(FaultHit("broker hang", at, now()))
        self.summary.broker_hangs += 1

    async def broker_outage(self) -> None:
        """The broker goes away while every worker runs: the proxy stops listening and
        cuts every open connection for `outage_s`, then listens again. Injected only when
        it cut live connections and every connect tried meanwhile (one every 0.5 s, from
        outside the proxy) was refused."""
        assert self.proxy is not None
        at = now()
        cut = await self.proxy.down()
        probes: list[bool] = []
        try:
            deadline = time.monotonic() + self.config.outage_s
            while True:
                probes.append(await asyncio.to_thread(self.proxy.refuses))
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                await asyncio.sleep(min(0.5, left))
        finally:
            await self.proxy.up()
        until = now()
        if not all(probes):
            raise RuntimeError(f"{probes.count(False)} of {len(probes)} connects not refused")
        if cut == 0:
            raise RuntimeError("no client connection was open to cut")
        self.hits.append(FaultHit("broker outage", at, until))
        self.summary.broker_outages += 1
        self.summary.outage_connections_cut += cut
        self.summary.outage_connects_refused += len(probes)

    def check_outages(self) -> None:
        """After the workers stopped: their own logs must show connects to the proxy
        refused (ECONNREFUSED; only the outage refuses them), or the outages did not
        reach a worker and the run fails."""
        if self.proxy is None:
            return
        needle = f"[Errno 111] Connect call failed ('127.0.0.1', {self.proxy.port})"
        logs = [self.config.workdir / f"{name}.log" for name in self.names.values()]
        self.summary.outage_worker_refusals = sum(
            log.read_text(errors="replace").count(needle) for log in logs if log.exists()
        )
        if self.summary.broker_outages and not self.summary.outage_worker_refusals:
            self.summary.problem("no worker's log shows a connect refused during the outages")

    async def restart_broker(self) -> None:
        """Stall every worker, wait until nothing more lands on the topics and the recorder
        read it all, kill the broker, start an empty one on the same port, wake the workers."""
        at = now()
        stalled = self.live()
        for proc in stalled:
            proc.send_signal(signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 10
            while not all(process_stopped(p.pid) for p in stalled):
                if time.monotonic() > deadline:
                    raise RuntimeError("workers did not stop on SIGSTOP within 10 s")
                await asyncio.sleep(0.01)
            # v3's condition first, as a measurement only (harness.v3_would_miss)
            v3_at = await self.recorder.settled_by_end_offsets(10)
            self.v3_settled.append((self.recorder.generation, v3_at))
            idle = self.proxy.produce_idle if self.proxy is not None else None
            if not await self.recorder.quiesced(60, idle):
                raise RuntimeError("the topics did not settle / the recorder did not catch up")
            await self.recorder.suspend()
            self.broker.kill()
            await asyncio.sleep(1.0)  # the workers' connections are refused meanwhile
            await self.broker.start()
            await create_topics(self.broker.bootstrap)
            self.recorder.new_generation()
        finally:
            for proc in stalled:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGCONT)
        self.hits.append(FaultHit("broker restart", at, now()))
        self.summary.broker_restarts += 1

    async def restart_postgres(self) -> None:
        assert self.cluster is not None
        at = now()
        await asyncio.to_thread(self.cluster.restart)
        self.hits.append(FaultHit("pg restart", at, now()))
        self.summary.pg_restarts += 1

    def plan(self) -> list[Step]:
        c, end = self.config, self.config.seconds * 0.85
        steps: list[Step] = []
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
        for n in range(c.outages if self.proxy is not None else 0):
            at = c.seconds * (0.35 + 0.45 * n / max(c.outages - 1, 1))
            steps.append((at, "broker outage", self.broker_outage))
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
            except Exception as exc:  # a fault that could not be injected fails the run
                self.summary.problem(f"fault {name} at {at:.0f}s did not inject: {exc!r}")
        self.check_crashes()
