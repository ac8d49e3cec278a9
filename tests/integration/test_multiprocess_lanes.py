"""Three real `jobledger worker` processes on one store (SQLite file, PostgreSQL).

Short lease settings (2 s partition lease, 0.3 s heartbeat) keep them at seconds. The
handlers append one line per delivery to a file, so the test checks what really went
out: the 21/21/22 split, and after a SIGKILL mid-batch nothing lost, at-most-once rows
delivered at most once (the rows that die: at most one a partition, also amid SQLite's
gathered commits), at-least-once rows at least once, per-key order kept; and with
workers joining mid-drain while each stalls once past its lease, no key is ever sent by
two processes at once (every delivery's order checked, not only first deliveries).
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
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from jobledger.config.settings import Settings
from jobledger.core.clock import SystemClock
from jobledger.domain.jobs import Job, JobStatus
from jobledger.domain.policies import SEND_MARGIN_SHARE
from jobledger.engine import Engine
from jobledger.storage.port import Store
from jobledger.storage.urls import open_store
from tests.integration import multiprocess_app
from tests.stores import all_jobs

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
    def __init__(self, url: str, out: Path, delay_s: float, **env: str) -> None:
        self.url = url
        self.env = {
            **os.environ,
            **FAST_ENV,
            **env,
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
        for lease in await store.coordination.leases()
        if lease.owner is not None and lease.lease_until is not None and lease.lease_until > now
    )


def deliveries(out: Path) -> list[dict[str, Any]]:
    """The deliveries the workers have written whole: a line a worker is still writing
    (no newline yet) is read at the next look, once complete."""
    if not out.exists():
        return []
    text = out.read_text()
    whole = text[: text.rfind("\n") + 1]
    return [json.loads(line) for line in whole.splitlines() if line]


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
            assert await store.coordination.live_workers(since) == []
        finally:
            workers.stop_all()
            await store.close()


@dataclass
class Killed:
    """What `kill_one_mid_drain` leaves: the jobs it enqueued (id → target), the killed
    worker's pid, every delivery and the rows still in the queue (all DEAD)."""

    ids: dict[str, str]
    victim: int
    seen: list[dict[str, Any]]
    rows: dict[str, Job]


async def kill_one_mid_drain(
    kind: str, tmp_path: Path, delay_s: float, chains: dict[str, int], kill_after: int
) -> Killed:
    """Three workers split the partitions; then `chains[target]` keys of ten versions
    each are enqueued per target, the first worker is SIGKILLed once it has delivered
    `kill_after` rows, and the two others drain the rest (every row delivered or DEAD)
    and stop cleanly."""
    out = tmp_path / "out.jsonl"
    async with store_url(kind, tmp_path) as url:
        store = open_store(url)
        await store.open()
        engine = Engine(store, settings=Settings())
        multiprocess_app.setup(engine)
        workers = Workers(url, out, delay_s)
        try:
            for i in range(3):
                workers.spawn(f"w{i}", tmp_path / f"w{i}.log")

            async def split() -> bool:
                return sorted((await lease_counts(store)).values()) == [21, 21, 22]

            await wait_until(split, 60, "the 21/21/22 split")
            ids: dict[str, str] = {}
            for target, keys in chains.items():
                async with engine.transaction() as tx:
                    for key in range(keys):
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
                return sum(1 for d in deliveries(out) if d["pid"] == victim.pid) >= kill_after

            await wait_until(started, 60, "the victim to deliver")
            victim.send_signal(signal.SIGKILL)
            victim.wait(timeout=10)

            async def drained() -> bool:
                return all(j.status == JobStatus.DEAD for j in await all_jobs(store))

            await wait_until(drained, 90, "every row to be delivered or DEAD")
            codes = workers.stop_all()
            assert codes[1:] == [0, 0]
            rows = {j.id: j for j in await all_jobs(store)}
        finally:
            workers.stop_all()
            await store.close()
    return Killed(ids, victim.pid, deliveries(out), rows)


async def test_sigkill_mid_batch_loses_nothing(kind: str, tmp_path: Path) -> None:
    killed = await kill_one_mid_drain(kind, tmp_path, 0.01, {"mp:amo": 40, "mp:alo": 40}, 20)
    ids, seen, rows = killed.ids, killed.seen, killed.rows
    count = Counter(d["id"] for d in seen)
    assert any(d["pid"] == killed.victim for d in seen)
    for job_id, target in ids.items():
        if target == "mp:alo":
            assert count[job_id] >= 1, f"at-least-once job {job_id} never delivered"
            assert job_id not in rows
    at_most_once_kept([i for i, t in ids.items() if t == "mp:amo"], seen, rows)
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


def at_most_once_kept(ids: list[str], seen: list[dict[str, Any]], rows: dict[str, Job]) -> None:
    """After a kill: each at-most-once row of `ids` went out at most once, one that never
    went out is DEAD, and the rows that died are the dead pod's rows in flight, at most
    one a partition, each with its reason."""
    count = Counter(d["id"] for d in seen)
    for job_id in ids:
        assert count[job_id] <= 1, f"at-most-once job {job_id} delivered {count[job_id]}x"
        if count[job_id] == 0:  # never sent: it must be DEAD (taken over in flight)
            assert job_id in rows and rows[job_id].status == JobStatus.DEAD
    dead = [r for r in rows.values() if r.status == JobStatus.DEAD]
    assert all(r.dead_reason == "in flight when its partition was taken over" for r in dead)
    per_partition = Counter(r.partition for r in dead)
    assert all(n == 1 for n in per_partition.values()), per_partition
    assert len(dead) <= 22


async def test_sigkill_amid_gathered_commits_leaves_one_row_a_partition(tmp_path: Path) -> None:
    """No-op handlers on SQLite: every commit a worker writes gathers the outcomes and
    next marks of all its busy partitions (`GroupCommitter` gathering). A worker killed
    mid-drain leaves at most one marked row a partition, judged DEAD by the taker-over;
    no row goes out twice and none is lost."""
    killed = await kill_one_mid_drain("sqlite", tmp_path, 0.0, {"mp:amo": 300}, 50)
    seen = killed.seen
    victims = {d["partition"] for d in seen if d["pid"] == killed.victim}
    # the kill landed mid-drain: the victim's partitions still had rows to send
    assert any(d["pid"] != killed.victim and d["partition"] in victims for d in seen)
    at_most_once_kept(list(killed.ids), seen, killed.rows)


def order_violations(seen: list[dict[str, Any]], margin_s: float) -> list[str]:
    """Per key, in the order the sends started (each line is appended as its send
    starts, with the time), every delivery must be

    * no further than one past the highest version delivered so far (no version goes
      out before every earlier one went out at least once);
    * after the same process's previous delivery: a later version (a process never
      goes back on its own sends);
    * after another process's delivery: the next version (a clean handoff: the old
      owner finished its round and released the partition), or anything, but only once
      `margin_s` has passed since that delivery: a takeover after the old owner's lease
      lapsed, and an owner stops sending `margin_s` before its lease ends. A resend by
      the new owner (rows whose outcomes the old one had not written yet) is fine.

    An old owner still sending after a new one started shows as a version going back
    or jumping ahead between two processes within the margin."""
    last: dict[tuple[str, str], tuple[int, int, float]] = {}  # key -> (version, pid, t)
    high: dict[tuple[str, str], int] = {}
    bad: list[str] = []
    for d in seen:
        chain = (d["target"], d["key"])
        version, pid, t = d["version"], d["pid"], d["t"]
        top = high.get(chain, 0)
        if version > top + 1:
            bad.append(f"{chain}: v{version} by pid {pid} before v{top + 1}")
        if chain in last:
            prev_version, prev_pid, prev_t = last[chain]
            if pid == prev_pid and version <= prev_version:
                bad.append(f"{chain}: pid {pid} sent v{version} again after v{prev_version}")
            elif pid != prev_pid and version != prev_version + 1 and t - prev_t < margin_s:
                bad.append(
                    f"{chain}: v{version} by pid {pid} {t - prev_t:.3f} s after"
                    f" v{prev_version} by pid {prev_pid}: two owners at once"
                )
        last[chain] = (version, pid, t)
        high[chain] = max(top, version)
    return bad


async def test_workers_joining_while_jobs_drain_never_interleave_a_key(
    kind: str, tmp_path: Path
) -> None:
    """With short leases and workers joining mid-drain, partitions move
    between processes while their rows go out. No process may send a row of a partition
    after its lease (less the safety margin) ran out, so no key is ever delivered by two
    processes at once: every delivery of a key is its next version, or a resend after a
    takeover, and every version is delivered. Each worker blocks its event loop for
    2.5 s once (a GC pause, a starved CPU), so its leases lapse mid-round and the others
    take its partitions over while its sends are under way. The previous code, which
    checked the lease once per round, failed this on both stores in every run (1,010 to
    1,580 repeats of 3,000 rows, keys sent by two processes at once)."""
    keys, versions = 50, 60
    out = tmp_path / "out.jsonl"
    async with store_url(kind, tmp_path) as url:
        store = open_store(url)
        await store.open()
        engine = Engine(store, settings=Settings())
        multiprocess_app.setup(engine)
        workers = Workers(url, out, 0.002, LANES_STALL="2.5@400")  # each stalls once
        try:
            workers.spawn("w0", tmp_path / "w0.log")

            async def one_owner() -> bool:
                return sum((await lease_counts(store)).values()) == 64

            await wait_until(one_owner, 60, "the first worker to own every partition")
            async with engine.transaction() as tx:
                for version in range(1, versions + 1):
                    for key in range(keys):
                        await engine.enqueue(
                            "mp:alo", {"v": version}, tx=tx, key=f"k{key}", version=version
                        )
            total = keys * versions
            for i, share in ((1, 0.1), (2, 0.3)):

                async def progressed(share: float = share) -> bool:
                    return len(deliveries(out)) >= total * share

                await wait_until(progressed, 120, f"{share:.0%} of the deliveries")
                workers.spawn(f"w{i}", tmp_path / f"w{i}.log")

            async def drained() -> bool:
                return not await all_jobs(store)

            await wait_until(drained, 180, "every row to be delivered")

            async def all_joined() -> bool:  # each installed its SIGTERM handler
                return len(await lease_counts(store)) == 3

            await wait_until(all_joined, 60, "the three workers to hold partitions")
            assert workers.stop_all() == [0, 0, 0]
        finally:
            workers.stop_all()
            await store.close()

    seen = deliveries(out)
    count = Counter((d["key"], d["version"]) for d in seen)
    missing = [(f"k{k}", v) for k in range(keys) for v in range(1, versions + 1)]
    assert [kv for kv in missing if count[kv] == 0] == []
    pids = {d["pid"] for d in seen}
    assert len(pids) >= 2, "the joining workers took no partition while rows drained"
    repeats = sum(n - 1 for n in count.values())
    # the workers' margin is 0.5 s of the 2 s lease; a little less for the time reads
    margin_s = 0.9 * float(FAST_ENV["JOBLEDGER_PARTITION_LEASE_S"]) * SEND_MARGIN_SHARE
    assert order_violations(seen, margin_s) == [], f"{len(seen)} deliveries, {repeats} repeats"
