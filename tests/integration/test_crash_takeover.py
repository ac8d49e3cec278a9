"""A dead worker is taken over within seconds, not when its 30 s lease runs out
(decisions D53-D57): three real `jobledger worker` processes on one store (SQLite file,
PostgreSQL), the default 30 s partition lease and 5-minute long-lane lease (heartbeat
1 s, only so the three split the partitions quickly).

* SIGKILL of the worker running the long-lane claims, mid-drain of both lanes: the next
  delivery from its partitions, the DEAD verdict of its at-most-once rows in flight, the
  rerun of its at-least-once claims and the DEAD of its at-most-once claims all come well
  before either lease (the bounds are generous: this checks the mechanism, the figures
  are bench/takeover.py's); nothing is lost, no at-most-once row goes twice, key order
  holds, and no two workers send a key at once.
* PostgreSQL: the liveness session of a live worker is terminated and the test keeps
  the worker from taking its token back, so another worker takes its partitions over:
  the worker must have stopped sending from them before the other starts.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jobledger.config.settings import Settings
from jobledger.core.clock import SystemClock
from jobledger.domain.jobs import Job, JobStatus
from jobledger.engine import Engine
from jobledger.storage.port import Store
from jobledger.storage.urls import open_store
from tests.integration import multiprocess_app
from tests.integration.test_multiprocess_lanes import (
    Workers,
    deliveries,
    lease_counts,
    order_violations,
    store_url,
    wait_until,
)
from tests.stores import all_jobs

pytestmark = pytest.mark.slow

#: default leases; a 1 s heartbeat only so that three workers split the partitions fast
ENV = {
    "JOBLEDGER_PARTITION_LEASE_S": "30",
    "JOBLEDGER_HEARTBEAT_S": "1",
    "JOBLEDGER_WORKER_LIVE_S": "3",
    "JOBLEDGER_LONG_LEASE_S": "300",
    "JOBLEDGER_LONG_HEARTBEAT_S": "60",
    "LANES_LONG_DELAY_S": "6",
}
#: "well before the lease": a takeover by lease expiry needs 30 s (5 minutes for claims)
WELL_BEFORE_S = 10.0
#: two workers sending one key must be this far apart (the grace is 0.5 s)
HANDOFF_S = 0.45
AMO_KEYS, AMO_VERSIONS = 100, 40
ALO_KEYS, ALO_VERSIONS = 40, 10
LONG_ROWS = 4  # of each long target


async def enqueue_all(engine: Engine) -> dict[str, str]:
    """Long-lane rows first (one worker claims them all), then the fast lane's."""
    ids: dict[str, str] = {}
    async with engine.transaction() as tx:
        for n in range(LONG_ROWS):
            for target in ("mp:long", "mp:long_amo"):
                done = await engine.enqueue(target, {"n": n}, tx=tx, key=f"{target}-{n}")
                assert done.job_id is not None
                ids[done.job_id] = target
    async with engine.transaction() as tx:
        for target, keys, versions in (
            ("mp:amo", AMO_KEYS, AMO_VERSIONS),
            ("mp:alo", ALO_KEYS, ALO_VERSIONS),
        ):
            for version in range(1, versions + 1):
                for key in range(keys):
                    done = await engine.enqueue(
                        target, {"v": version}, tx=tx, key=f"{target}-{key}", version=version
                    )
                    assert done.job_id is not None
                    ids[done.job_id] = target
    return ids


async def split(store: Store) -> bool:
    return sorted((await lease_counts(store)).values()) == [21, 21, 22]


async def owned_by(store: Store, pod: str) -> set[int]:
    now = SystemClock().now()
    return {
        lease.partition
        for lease in await store.coordination.leases()
        if lease.owner == pod and lease.lease_until is not None and lease.lease_until > now
    }


def first_after(
    seen: list[dict[str, Any]], t: float, partitions: set[int], pid: int
) -> dict[int, float]:
    """Per partition: when another process first sent one of its fast-lane rows after `t`."""
    first: dict[int, float] = {}
    for d in seen:
        if d["t"] > t and d["pid"] != pid and d["partition"] in partitions and d["lane"] == "fast":
            first.setdefault(d["partition"], d["t"])
    return first


def check_deliveries(
    seen: list[dict[str, Any]], ids: dict[str, str], rows: dict[str, Job]
) -> list[Job]:
    """Nothing lost, at-most-once at most once, key order by first delivery, no two
    workers on one key at once; the at-most-once fast rows that died."""
    count = Counter(d["id"] for d in seen)
    for job_id, target in ids.items():
        if target in ("mp:alo", "mp:long"):
            assert count[job_id] >= 1, f"at-least-once job {job_id} never delivered"
            assert job_id not in rows, f"at-least-once job {job_id} left {rows[job_id]}"
        else:
            assert count[job_id] <= 1, f"at-most-once job {job_id} delivered {count[job_id]}x"
            if count[job_id] == 0:
                assert job_id in rows and rows[job_id].status == JobStatus.DEAD
    first: dict[tuple[str, str], list[int]] = defaultdict(list)
    delivered: set[str] = set()
    for d in seen:
        if d["id"] not in delivered and d["target"] in ("mp:amo", "mp:alo"):
            delivered.add(d["id"])
            first[(d["target"], d["key"])].append(d["version"])
    for (target, key), versions in first.items():
        assert versions == sorted(versions), f"{target} {key} out of order: {versions}"
    # every delivery, not only first ones (a DEAD at-most-once row is skipped: not here)
    assert order_violations([d for d in seen if d["target"] == "mp:alo"], HANDOFF_S) == []
    return [r for r in rows.values() if r.target == "mp:amo" and r.status == JobStatus.DEAD]


@pytest.fixture(params=["sqlite", "postgres"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@dataclass
class Run:
    store: Store
    workers: Workers
    ids: dict[str, str]  # job id -> target
    out: Path

    def sending(self, pid: int) -> Any:
        """A check: the worker `pid` has sent 20 at-most-once rows."""

        async def check() -> bool:
            sent = [d for d in deliveries(self.out) if d["pid"] == pid]
            return sum(d["target"] == "mp:amo" for d in sent) >= 20

        return check

    async def drain(self) -> dict[str, Job]:
        """Wait until every row was delivered or is DEAD; the rows left."""

        async def drained() -> bool:
            return all(j.status == JobStatus.DEAD for j in await all_jobs(self.store))

        await wait_until(drained, 120, "every row to be delivered or DEAD")
        return {j.id: j for j in await all_jobs(self.store)}


@asynccontextmanager
async def three_workers(url: str, tmp_path: Path) -> AsyncIterator[Run]:
    """Three workers split the partitions 21/21/22, then both lanes' rows are enqueued."""
    out = tmp_path / "out.jsonl"
    store = open_store(url)
    await store.open()
    engine = Engine(store, settings=Settings())
    multiprocess_app.setup(engine)
    workers = Workers(url, out, 0.02, **ENV)
    try:
        for i in range(3):
            workers.spawn(f"w{i}", tmp_path / f"w{i}.log")
        await wait_until(lambda: split(store), 60, "the 21/21/22 split")
        yield Run(store, workers, await enqueue_all(engine), out)
    finally:
        workers.stop_all()
        await store.close()


async def test_a_killed_worker_is_taken_over_well_before_its_leases(
    kind: str, tmp_path: Path
) -> None:
    async with store_url(kind, tmp_path) as url, three_workers(url, tmp_path) as run:
        store, workers, ids, out = run.store, run.workers, run.ids, run.out

        async def claimed() -> list[Job]:
            rows = await all_jobs(store)
            return [r for r in rows if r.status == JobStatus.RUNNING]

        async def all_claimed() -> bool:
            return len(await claimed()) == 2 * LONG_ROWS

        await wait_until(all_claimed, 30, "the long-lane rows to be claimed")
        victim_pod = Counter(r.claimed_by for r in await claimed()).most_common(1)[0][0]
        assert victim_pod is not None
        victim = workers.procs[int(victim_pod[1:])]
        await wait_until(run.sending(victim.pid), 60, "the victim to deliver")
        partitions = await owned_by(store, victim_pod)
        claims = {r.id: r.target for r in await claimed() if r.claimed_by == victim_pod}
        victim.send_signal(signal.SIGKILL)
        killed_at = time.time()
        victim.wait(timeout=10)
        rows = await run.drain()
        codes = workers.stop_all()
        assert [c for p, c in zip(workers.procs, codes, strict=True) if p is not victim] == [0, 0]

    seen = deliveries(out)
    assert partitions and claims
    dead = check_deliveries(seen, ids, rows)
    # the next delivery of each of its partitions, and the verdict on its marks
    first = first_after(seen, killed_at, partitions, victim.pid)
    sent_before = {d["id"] for d in seen if d["t"] <= killed_at}
    waiting = {
        d["partition"]
        for d in seen
        if d["partition"] in partitions and d["id"] not in sent_before and d["lane"] == "fast"
    }
    assert waiting <= set(first), "a partition of the dead worker was never served again"
    resumed = min(first.values()) - killed_at
    assert resumed < WELL_BEFORE_S, f"its partitions resumed {resumed:.1f} s after the kill"
    in_flight = [r for r in dead if r.partition in partitions]
    assert in_flight, "the dead worker had no at-most-once row in flight"
    assert all(r.dead_reason == "in flight when its partition was taken over" for r in dead)
    assert len(in_flight) <= len(partitions)
    verdict = max(r.closed_at.timestamp() for r in in_flight if r.closed_at) - killed_at
    assert verdict < WELL_BEFORE_S, f"DEAD verdict {verdict:.1f} s after the kill"
    # its long-lane claims: at-least-once run again elsewhere, at-most-once DEAD
    reruns = [
        d["t"] - killed_at
        for d in seen
        if d["id"] in claims and d["pid"] != victim.pid and d["t"] > killed_at
    ]
    alo = [i for i, t in claims.items() if t == "mp:long"]
    amo = [i for i, t in claims.items() if t == "mp:long_amo"]
    assert len(reruns) == len(alo)
    assert max(reruns, default=0.0) < WELL_BEFORE_S, f"claims rerun after {reruns}"
    for job_id in amo:
        row = rows[job_id]
        assert row.status == JobStatus.DEAD
        assert row.dead_reason == "its pod died while running; the run may have finished"
        assert row.closed_at is not None
        assert row.closed_at.timestamp() - killed_at < WELL_BEFORE_S
    print(
        f"\n{kind}: kill -> next delivery of its partitions {resumed:.2f} s;"
        f" DEAD verdict of its {len(in_flight)} marks {verdict:.2f} s;"
        f" its {len(alo)} + {len(amo)} claims rerun / DEAD within"
        f" {max(reruns, default=0.0):.2f} s"
    )


async def test_a_worker_whose_liveness_session_ends_stops_before_it_is_taken_over(
    tmp_path: Path,
) -> None:
    """The workers connect as a role of their own on a private cluster; the test ends the
    victim's liveness session while that role may open no new connection, so the victim
    cannot take its token back and another worker takes its partitions over."""
    pytest.importorskip("jobledger.storage.postgres")
    import psycopg

    from jobledger.storage.postgres.liveness import token_key
    from tests.private_pg import pg_bin, private_cluster

    if pg_bin() is None:
        pytest.skip("PostgreSQL server binaries (initdb) are not installed")
    async with private_cluster() as cluster:
        async with await psycopg.AsyncConnection.connect(cluster.dsn, autocommit=True) as admin:
            await admin.execute("CREATE ROLE worker LOGIN")
            await admin.execute("CREATE DATABASE drop_test OWNER worker")
        url = f"postgresql://worker@127.0.0.1:{cluster.port}/drop_test"
        async with three_workers(url, tmp_path) as run:
            store, workers, ids, out = run.store, run.workers, run.ids, run.out
            victim = workers.procs[0]
            await wait_until(run.sending(victim.pid), 60, "the victim to deliver")
            partitions = await owned_by(store, "w0")
            key = token_key("jobledger", "w0")
            async with await psycopg.AsyncConnection.connect(
                cluster.url("drop_test"), autocommit=True
            ) as admin:
                cur = await admin.execute(
                    "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
                    " AND mode = 'ExclusiveLock' AND classid = %s::bigint::oid"
                    " AND objid = %s::bigint::oid AND objsubid = 1",
                    (key >> 32, key & 0xFFFFFFFF),
                )
                [(session,)] = await cur.fetchall()
                await admin.execute("ALTER ROLE worker CONNECTION LIMIT 0")
                await admin.execute("SELECT pg_terminate_backend(%s)", (session,))
                dropped_at = time.time()

                async def taken_over() -> bool:
                    return not (await owned_by(store, "w0")) & partitions

                await wait_until(taken_over, WELL_BEFORE_S, "the victim's partitions to move")
                taken_at = time.time()
                await asyncio.sleep(2.0)  # the new owners send; the victim cannot connect
                await admin.execute("ALTER ROLE worker CONNECTION LIMIT -1")
                released_at = time.time()
            rows = await run.drain()  # the victim took its token back and joined again
            assert workers.stop_all() == [0, 0, 0]

    seen = deliveries(out)
    dead = check_deliveries(seen, ids, rows)
    assert all(r.dead_reason == "in flight when its partition was taken over" for r in dead)
    assert len(dead) <= len(partitions)
    first = first_after(seen, dropped_at, partitions, victim.pid)
    assert first, "no other worker sent from the victim's partitions"
    late = [
        d
        for d in seen
        if d["pid"] == victim.pid
        and d["partition"] in first
        and dropped_at < d["t"] < released_at
        and d["t"] >= first[d["partition"]]
    ]
    assert late == [], f"the worker sent after its partitions were taken over: {late[:3]}"
    stopped = max(
        (d["t"] for d in seen if d["pid"] == victim.pid and dropped_at < d["t"] < released_at),
        default=dropped_at,
    )
    print(
        f"\nliveness session ended: last send of the worker {stopped - dropped_at:.3f} s after,"
        f" first send of another from its partitions {min(first.values()) - dropped_at:.3f} s"
        f" after, all {len(partitions)} moved by {taken_at - dropped_at:.2f} s"
    )
