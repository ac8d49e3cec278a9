"""kill -9 of a worker → its work resumes elsewhere: the time, round by round.

What users run: three `jobledger worker` processes, default settings (30 s partition
lease, 10 s heartbeat, 5-minute long-lane lease), on a fresh store each round (a new
PostgreSQL database on the bench server, or a new SQLite file). The workers' `--app` is
the lane tests' `tests.integration.multiprocess_app` (a line per delivery with the time,
the process and the partition). While a driver commits ~100 fast-lane jobs a second
(half at-most-once, half at-least-once, 500 keys; a delivery takes 50 ms) and a long-lane
job of each mode every 2 s (each runs 20 s), the worker holding the most long-lane claims is killed with
SIGKILL once the three have split the partitions 21/21/22. Measured from the kill:

* fast: the first delivery, by another worker, of a row of the dead worker's partitions;
* dead: the DEAD verdict of the first at-most-once row it had in flight (its `JobDead`;
  the kill is sent while one of its at-most-once rows is marked in flight);
* long: the first of its long-lane claims taken over (an at-least-once run started by
  another worker, or an at-most-once claim closed DEAD).

Same-run baseline: `--baseline-src DIR` runs the workers from another source tree (the
tree before this change: they wait for the leases), alternating A B A B … by round.
The baseline's long-lane figure waits for its 5-minute lease, so only its first
`--long-baseline` rounds wait for it.

    .venv/bin/python bench/takeover.py --store postgres --pairs 10 --baseline-src ../base/src
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from pg_common import SERVER

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.integration import multiprocess_app  # noqa: E402
from tests.stores import all_jobs  # noqa: E402

from jobledger.config.settings import Settings  # noqa: E402
from jobledger.core.clock import SystemClock  # noqa: E402
from jobledger.domain.jobs import JobStatus  # noqa: E402
from jobledger.engine import Engine  # noqa: E402
from jobledger.storage.port import Store  # noqa: E402
from jobledger.storage.urls import open_store  # noqa: E402

JOBLEDGER = Path(sys.executable).parent / "jobledger"
APP = "tests.integration.multiprocess_app:setup"
FAST_PER_S = 100
LONG_EVERY_S = 2.0
LONG_RUN_S = 20.0
KEYS = 500


@dataclass
class Round:
    side: str
    fast: float | None = None
    dead: float | None = None
    long: float | None = None
    partitions: int = 0
    claims: int = 0


@contextlib.asynccontextmanager
async def fresh_url(kind: str, workdir: Path) -> AsyncIterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{workdir / f'takeover-{uuid.uuid4().hex[:8]}.db'}"
        return
    name = f"jl_takeover_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(SERVER, autocommit=True) as admin:
        await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield SERVER.rsplit("/", 1)[0] + f"/{name}"
    finally:
        async with await psycopg.AsyncConnection.connect(SERVER, autocommit=True) as admin:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def spawn(
    url: str,
    pod: str,
    out: Path,
    src: str | None,
    log: Path,
    *,
    long_run_s: float = LONG_RUN_S,
    settings: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """A worker from `src` (None: this tree) with default settings but `settings`
    (JOBLEDGER_* variables), its deliveries appended to `out`."""
    path = [str(ROOT)] + ([src] if src else [])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([*path, os.environ.get("PYTHONPATH", "")]),
        "LANES_OUT": str(out),
        "LANES_DELAY_S": "0.05",
        "LANES_LONG_DELAY_S": str(long_run_s),
    }
    env = {k: v for k, v in env.items() if not k.startswith("JOBLEDGER_")}  # defaults
    env.update(settings or {})
    with log.open("wb") as sink:
        return subprocess.Popen(
            [str(JOBLEDGER), "--store", url, "worker", "--app", APP, "--pod-id", pod],
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )


def stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM, then SIGKILL what is still running after 30 s."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def lines(out: Path) -> list[dict[str, Any]]:
    if not out.exists():
        return []
    return [json.loads(line) for line in out.read_text().splitlines() if line]


async def owners(store: Store) -> Counter[str]:
    now = SystemClock().now()
    return Counter(
        lease.owner
        for lease in await store.coordination.leases()
        if lease.owner and lease.lease_until and lease.lease_until > now
    )


async def drive(engine: Engine, stop: asyncio.Event) -> None:
    """~FAST_PER_S fast-lane jobs a second, a long-lane job of each mode every 2 s."""
    n = 0
    next_long = time.monotonic()
    while not stop.is_set():
        async with engine.transaction() as tx:
            for _ in range(FAST_PER_S // 10):
                target = "mp:amo" if n % 2 else "mp:alo"
                await engine.enqueue(target, {"n": n}, tx=tx, key=f"k{n % KEYS}")
                n += 1
            if time.monotonic() >= next_long:
                next_long += LONG_EVERY_S
                for target in ("mp:long", "mp:long_amo"):
                    await engine.enqueue(target, {"n": n}, tx=tx, key=f"long{n}")
        await asyncio.sleep(0.1)


async def until(check: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(0.05)
    return False


async def one_round(kind: str, side: str, src: str | None, wait_long: bool, work: Path) -> Round:
    result = Round(side)
    out = work / f"out-{uuid.uuid4().hex[:8]}.jsonl"
    async with fresh_url(kind, work) as url:
        store = open_store(url)
        await store.open()
        engine = Engine(store, settings=Settings())
        multiprocess_app.setup(engine)
        procs = [spawn(url, f"w{i}", out, src, work / f"{side}-w{i}.log") for i in range(3)]
        stop = asyncio.Event()
        driver = asyncio.create_task(drive(engine, stop))
        try:

            async def split() -> bool:
                return sorted((await owners(store)).values()) == [21, 21, 22]

            if not await until(split, 120):
                raise RuntimeError(f"{side}: no 21/21/22 split within 120 s")
            await asyncio.sleep(5.0)  # steady delivery, claims running on every worker
            running = [j for j in await all_jobs(store) if j.status == JobStatus.RUNNING]
            busiest = Counter(j.claimed_by for j in running).most_common(1)
            pod = busiest[0][0] if busiest and busiest[0][0] else "w0"
            victim = procs[int(pod[1:])]
            partitions = {
                lease.partition for lease in await store.coordination.leases() if lease.owner == pod
            }
            claims = {j.id for j in running if j.claimed_by == pod}
            result.partitions, result.claims = len(partitions), len(claims)

            async def marked() -> bool:  # the kill lands while an at-most-once row is sent
                return any(j.inflight_token and j.claimed_by == pod for j in await all_jobs(store))

            in_flight = await until(marked, 30)
            victim.send_signal(signal.SIGKILL)
            killed = time.time()
            victim.wait(timeout=10)

            async def fast() -> bool:
                for d in lines(out):
                    if (
                        d["t"] > killed
                        and d["pid"] != victim.pid
                        and d["partition"] in partitions
                        and d["target"] in ("mp:amo", "mp:alo")
                    ):
                        result.fast = d["t"] - killed
                        return True
                return False

            await until(fast, 90)

            async def dead() -> bool:  # the takeover of each partition writes its verdicts
                found = [
                    j.closed_at.timestamp() - killed
                    for j in await all_jobs(store)
                    if j.status == JobStatus.DEAD
                    and j.closed_at
                    and j.partition in partitions
                    and j.target == "mp:amo"
                ]
                result.dead = min(found) if found else None
                return bool(found)

            if in_flight:
                await until(dead, 60)

            async def long() -> bool:
                reruns = [
                    d["t"] - killed
                    for d in lines(out)
                    if d["id"] in claims and d["pid"] != victim.pid and d["t"] > killed
                ]
                closed = [
                    j.closed_at.timestamp() - killed
                    for j in await all_jobs(store)
                    if j.id in claims and j.status == JobStatus.DEAD and j.closed_at
                ]
                if reruns or closed:
                    result.long = min(reruns + closed)
                    return True
                return False

            if claims and wait_long:
                await until(long, 400)
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                await driver
            stop_all(procs)
            await store.close()
    return result


def print_sides(rounds: Sequence[Any], metrics: Sequence[str]) -> None:
    """Each side's summary of `metrics`, attributes of its rounds (None: not reached)."""
    for side in ("this", "baseline"):
        mine = [r for r in rounds if r.side == side]
        if not mine:
            continue
        print(f"\n{side}:")
        for metric in metrics:
            values = [v for r in mine if (v := getattr(r, metric)) is not None]
            print("  " + summary(metric, values))


def summary(name: str, values: list[float]) -> str:
    if not values:
        return f"{name}: -"
    return (
        f"{name}: median {statistics.median(values):.2f} s, {min(values):.2f} to {max(values):.2f},"
        f" n={len(values)}"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--pairs", type=int, default=10, help="rounds of each side")
    parser.add_argument("--baseline-src", help="run the baseline side's workers from this src")
    parser.add_argument("--long-baseline", type=int, default=2, help="baseline rounds that wait")
    args = parser.parse_args()
    main_task = asyncio.current_task()
    assert main_task is not None  # SIGTERM: stop the workers and drop the database first
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    print(f"store {args.store}; load average {os.getloadavg()}", flush=True)
    rounds: list[Round] = []
    with tempfile.TemporaryDirectory(prefix="jobledger-takeover-") as tmp:
        work = Path(tmp)
        for n in range(args.pairs):
            sides = [("this", None)] + (
                [("baseline", args.baseline_src)] if args.baseline_src else []
            )
            for side, src in sides:
                wait_long = side == "this" or n < args.long_baseline
                r = await one_round(args.store, side, src, wait_long, work)
                rounds.append(r)
                print(
                    f"round {n + 1} {side}: fast {r.fast if r.fast is None else round(r.fast, 3)}"
                    f" dead {r.dead if r.dead is None else round(r.dead, 3)}"
                    f" long {r.long if r.long is None else round(r.long, 3)}"
                    f" ({r.partitions} partitions, {r.claims} claims; load {os.getloadavg()[0]:.2f})",
                    flush=True,
                )
    print_sides(rounds, ("fast", "dead", "long"))
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    asyncio.run(main())
