"""Three real `jobledger worker` processes on one store (SQLite file, PostgreSQL).

Short lease settings (2 s partition lease, 0.3 s heartbeat) keep them at seconds. The
handlers append one line per delivery to a file, so the test checks what really went
out: the 21/21/22 split, and after a SIGKILL mid-batch nothing lost, at-most-once rows
delivered at most once, at-least-once rows at least once, per-key order kept.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from jobledger.config.settings import Settings
from jobledger.core.clock import SystemClock
from jobledger.domain.jobs import JobStatus
from jobledger.engine import Engine
from jobledger.storage.port import Store
from jobledger.storage.urls import open_store
from tests.integration import multiprocess_app

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
JOBLEDGER = Path(sys.executable).parent / "jobledger"
APP = "tests.integration.multiprocess_app:setup"
FAST_ENV = {
    "JOBLEDGER_PARTITION_LEASE_S": "2",
    "JOBLEDGER_HEARTBEAT_S": "0.3",
    "JOBLEDGER_WORKER_LIVE_S": "1.5",
    "JOBLEDGER_SAFETY_POLL_S": "5",
    "JOBLEDGER_LONG_LEASE_S": "3",
    "JOBLEDGER_LONG_HEARTBEAT_S": "1",
}


@asynccontextmanager
async def store_url(kind: str, tmp_path: Path) -> AsyncIterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'jobs.db'}"
        return
    pytest.importorskip("jobledger.storage.postgres")
    import psycopg

    from tests.factories.postgres import dsn, reachable_dsn

    base = await reachable_dsn()  # a key=value conninfo: connect with it, build no URL from it
    name = f"jl_mp_{uuid.uuid4().hex[:10]}"
    async with await psycopg.AsyncConnection.connect(base, autocommit=True) as conn:
        await conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield dsn().rsplit("/", 1)[0] + f"/{name}"
    finally:
        async with await psycopg.AsyncConnection.connect(base, autocommit=True) as conn:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Workers:
    def __init__(self, url: str, out: Path, delay_s: float) -> None:
        self.url = url
        self.env = {
            **os.environ,
            **FAST_ENV,
            "LANES_OUT": str(out),
            "LANES_DELAY_S": str(delay_s),
            "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        }
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, name: str, log: Path, app: str = APP) -> subprocess.Popen[bytes]:
        with log.open("wb") as sink:
            proc = subprocess.Popen(
                [
                    str(JOBLEDGER),
                    "--store",
                    self.url,
                    "worker",
                    "--app",
                    app,
                    "--pod-id",
                    name,
                    "--log-level",
                    "WARNING",
                ],
                cwd=ROOT,
                env=self.env,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        return proc

    def stop_all(self) -> list[int | None]:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes: list[int | None] = []
        for proc in self.procs:
            try:
                codes.append(proc.wait(timeout=20))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes.append(None)
        return codes


async def wait_until(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def lease_counts(store: Store) -> Counter[str]:
    now = SystemClock().now()
    return Counter(
        lease.owner
        for lease in await store.leases()
        if lease.owner is not None and lease.lease_until is not None and lease.lease_until > now
    )


def deliveries(out: Path) -> list[dict[str, Any]]:
    if not out.exists():
        return []
    return [json.loads(line) for line in out.read_text().splitlines() if line]


@pytest.fixture(params=["sqlite", "postgres"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_three_workers_split_21_21_22_and_leave_cleanly(kind: str, tmp_path: Path) -> None:
    async with store_url(kind, tmp_path) as url:
        store = open_store(url)
        await store.open()
        workers = Workers(url, tmp_path / "out.jsonl", 0.0)
        try:
            for i in range(3):
                workers.spawn(f"w{i}", tmp_path / f"w{i}.log")

            async def split() -> bool:
                return sorted((await lease_counts(store)).values()) == [21, 21, 22]

            await wait_until(split, 60, "the 21/21/22 split")
            assert workers.stop_all() == [0, 0, 0]
            assert await lease_counts(store) == Counter()
            since = SystemClock().now() - timedelta(minutes=1)
            assert await store.live_workers(since) == []
        finally:
            workers.stop_all()
            await store.close()


async def test_sigkill_mid_batch_loses_nothing(kind: str, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    async with store_url(kind, tmp_path) as url:
        store = open_store(url)
        await store.open()
        engine = Engine(store, settings=Settings())
        multiprocess_app.setup(engine)
        workers = Workers(url, out, 0.01)
        try:
            for i in range(3):
                workers.spawn(f"w{i}", tmp_path / f"w{i}.log")

            async def split() -> bool:
                return sorted((await lease_counts(store)).values()) == [21, 21, 22]

            await wait_until(split, 60, "the 21/21/22 split")
            ids: dict[str, str] = {}
            for target in ("mp:amo", "mp:alo"):
                async with engine.transaction() as tx:
                    for key in range(40):
                        for version in range(1, 11):
                            done = await engine.enqueue(
                                target,
                                {"v": version},
                                tx=tx,
                                key=f"{target}-{key}",
                                version=version,
                            )
                            assert done.job_id is not None
                            ids[done.job_id] = target
            victim = workers.procs[0]

            async def started() -> bool:
                return sum(1 for d in deliveries(out) if d["pid"] == victim.pid) >= 20

            await wait_until(started, 60, "the victim to deliver")
            victim.send_signal(signal.SIGKILL)
            victim.wait(timeout=10)

            async def drained() -> bool:
                return all(j.status == JobStatus.DEAD for j in await store.all_jobs())

            await wait_until(drained, 90, "every row to be delivered or DEAD")
            codes = workers.stop_all()
            assert codes[1:] == [0, 0]
            rows = {j.id: j for j in await store.all_jobs()}
        finally:
            workers.stop_all()
            await store.close()

    seen = deliveries(out)
    count = Counter(d["id"] for d in seen)
    assert any(d["pid"] == victim.pid for d in seen)
    for job_id, target in ids.items():
        if target == "mp:alo":
            assert count[job_id] >= 1, f"at-least-once job {job_id} never delivered"
            assert job_id not in rows
        else:
            assert count[job_id] <= 1, f"at-most-once job {job_id} delivered {count[job_id]}x"
            if count[job_id] == 0:  # never sent: it must be DEAD (taken over in flight)
                assert job_id in rows and rows[job_id].status == JobStatus.DEAD
    # the at-most-once rows that died are exactly the victim's rows in flight
    dead = [r for r in rows.values() if r.status == JobStatus.DEAD]
    assert all(r.dead_reason == "in flight when its partition was taken over" for r in dead)
    assert len(dead) <= 22
    # per-key order: a version is first delivered only after every earlier one
    # (at-most-once: after every earlier one that was not closed DEAD)
    first: dict[tuple[str, str], list[int]] = defaultdict(list)
    delivered: set[str] = set()
    for d in seen:
        if d["id"] in delivered:
            continue
        delivered.add(d["id"])
        first[(d["target"], d["key"])].append(d["version"])
    for (target, chain), versions in first.items():
        assert versions == sorted(versions), f"{target} {chain} out of order: {versions}"
        if target == "mp:alo":
            assert versions == list(range(1, 11)), f"{chain}: {versions}"
