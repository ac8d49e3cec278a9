"""SQLite at-least-once drain through a started pod, against raw sqlite3 in the same run.

    .venv/bin/python bench/sqlite_drain.py --jobs 20000 --rounds 2

Each round, on fresh files in a temporary folder:

* **engine**: N no-op at-least-once jobs enqueued (distinct keys, all partitions; not
  timed), then a `Runtime` started with default settings on a default `SqliteStore`
  (WAL, `synchronous=FULL`, the connections' threads) and timed from `start()` until the
  last handler ran and no job is left. Prints jobs/s, the commits the pod made, the CPU
  time per job of this process (SQLite runs inside it) and the longest stall of the
  event loop (how late a 10 ms timer fired).
* **engine, inline**: the same with `SqliteStore(offload=False)` (every SQLite call on
  the event-loop thread; not the default: a commit then freezes the loop).
* **raw same writes**: plain sqlite3 on a file with the store's own schema and the
  writer connection's settings (`base.WRITER_CACHE_KIB`, `WAL_AUTOCHECKPOINT_PAGES`),
  filled by the same enqueue: per transaction (`BEGIN IMMEDIATE`) read PENDING rows
  through `jobs_fast_pending`, 100 per partition, until the transaction holds as many
  as one group commit of the pod (`SqliteStore.group_commit_changes`), insert one
  outcome event per row (text prepared outside the timing), delete the rows, commit; at
  `synchronous=FULL` (the store's) and `NORMAL`. The floor of what SQLite does for the
  same rows, indexes and commit sizes, without the engine's domain work.
* **raw queue**: `DELETE … RETURNING` of 100 rows per transaction on a table without
  indexes (`synchronous=FULL`), the bare queue operation.

`--writes` runs only the raw same writes, with one thing changed at a time: SQLite's
default cache and checkpoint, the store's settings, without the four admin indexes
(`jobs_status`, `jobs_target`, `jobs_code`, `jobs_key`), `jobs` as a WITHOUT ROWID
table, `synchronous=NORMAL`; each line splits the time per job into the reads, the
event inserts, the deletes and the commit.

Ratios are engine / raw from the same round. Plain script, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path

import drain
from drain import enqueue_noops, loop_lag, raw_sqlite

from jobledger.config.settings import Settings
from jobledger.domain.jobs import Job
from jobledger.engine import Engine
from jobledger.reactors.runtime import Runtime
from jobledger.storage.sqlite import SqliteStore
from jobledger.storage.sqlite.connections import WAL_AUTOCHECKPOINT_PAGES, WRITER_CACHE_KIB

TARGET = "bench:noop"


async def filled_store(path: Path, jobs: int, *, offload: bool = True) -> tuple[Engine, list[int]]:
    store = SqliteStore(str(path), offload=offload)
    await store.open()
    # the collector tuned as `jobledger worker` runs (D29)
    engine = Engine(store, settings=Settings(gc_freeze=True))
    done = [0]

    async def noop(job: Job) -> None:
        done[0] += 1

    engine.targets.register(TARGET, "fast", noop, delivery_mode="at_least_once")
    await enqueue_noops(engine, jobs)
    return engine, done


def thread_cpu() -> dict[str, float]:
    """CPU seconds so far of this process's threads: the event loop's, the store's writer
    and reader threads, and the rest, by their Python names (Linux `/proc`)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        name = names.get(int(task), "other")
        kind = next((k for k, p in THREADS.items() if name.startswith(p)), "other")
        out[kind] = out.get(kind, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


#: thread name prefixes (`threading.Thread.name`) of the parts `thread_cpu` reports
THREADS = {"loop": "MainThread", "writer": "jobledger-sqlite-w", "reader": "jobledger-sqlite-r"}


async def engine_drain(folder: Path, jobs: int, *, offload: bool) -> float:
    engine, done = await filled_store(folder / f"engine-{offload}.db", jobs, offload=offload)
    store = engine.store
    runtime = Runtime(engine, pod_id="bench")
    drain.LAGS.clear()
    lag = asyncio.create_task(loop_lag())
    began = time.perf_counter()
    cpu = time.process_time()
    threads = thread_cpu()
    await runtime.start()
    while done[0] < jobs:
        await asyncio.sleep(0.002)
    while await store.queue.next_due(list(range(64)), engine.targets.get(TARGET).lane):
        await asyncio.sleep(0.002)
    elapsed = time.perf_counter() - began
    cpu = time.process_time() - cpu
    split = {k: v - threads.get(k, 0.0) for k, v in thread_cpu().items()}
    commits = runtime.committer.commits
    lag.cancel()
    stall = max(drain.LAGS, default=0.0)
    await runtime.stop()
    await store.close()
    label = "engine (default store)" if offload else "engine, inline (offload=False)"
    print(
        f"  {label:32s} {jobs / elapsed:9,.0f} jobs/s  ({elapsed:.2f} s, {commits} commits,"
        f" {cpu / jobs * 1e6:.0f} µs CPU/job in this process, loop stall ≤ {stall * 1e3:.0f} ms)",
        flush=True,
    )
    shares = ", ".join(f"{k} {split.get(k, 0.0) / jobs * 1e6:.0f}" for k in (*THREADS, "other"))
    print(f"  {'':32s} µs CPU/job by thread: {shares}", flush=True)
    return jobs / elapsed


#: the writer connection's settings (storage/sqlite/base.py)
STORE_PRAGMAS = (
    f"PRAGMA cache_size = -{WRITER_CACHE_KIB}",
    f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES}",
)
ADMIN_INDEXES = ("jobs_status", "jobs_target", "jobs_code", "jobs_key")


def without_rowid(conn: sqlite3.Connection) -> list[str]:
    """Statements that rebuild `jobs` as a WITHOUT ROWID table with the same indexes."""
    table = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'jobs'").fetchone()[0]
    indexes = [
        r[0]
        for r in conn.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name = 'jobs' AND type = 'index'"
            " AND sql IS NOT NULL"
        )
    ]
    rebuilt = table.replace("CREATE TABLE jobs", "CREATE TABLE jobs2").rstrip() + " WITHOUT ROWID"
    return [
        rebuilt,
        "INSERT INTO jobs2 SELECT * FROM jobs",
        "DROP TABLE jobs",
        "ALTER TABLE jobs2 RENAME TO jobs",
        *indexes,
    ]


async def raw_same_writes(
    folder: Path,
    jobs: int,
    synchronous: str = "FULL",
    *,
    label: str = "",
    pragmas: tuple[str, ...] = STORE_PRAGMAS,
    admin_indexes: bool = True,
    rowid: bool = True,
) -> float:
    label = label or f"raw same writes, {synchronous}"
    path = folder / f"raw-same-{len(os.listdir(folder))}.db"
    engine, _ = await filled_store(path, jobs)
    await engine.store.close()
    conn = sqlite3.connect(path, isolation_level=None)
    prep = [] if rowid else without_rowid(conn)
    prep += [] if admin_indexes else [f"DROP INDEX {name}" for name in ADMIN_INDEXES]
    for statement in prep:
        conn.execute(statement)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    for pragma in pragmas:
        conn.execute(pragma)
    event = ("JobSucceeded", '{"attempts":1}', '{"id":"jobledger","via":"system","role":null}')
    select = (
        "SELECT id, stream_version, last_hash FROM jobs INDEXED BY jobs_fast_pending"
        " WHERE status = 'PENDING' AND lane = 'fast' AND \"partition\" = ?"
        " ORDER BY order_key, version, id LIMIT 100"
    )
    insert = (
        "INSERT INTO events (stream, version, type, data, at, actor, trace_id, prev_hash, hash)"
        " VALUES (?, ?, ?, ?, '2026-12-01T00:00:00.000Z', ?, NULL, ?, ?)"
    )
    drained = 0
    commits = 0
    steps = dict.fromkeys(("read", "insert", "delete", "commit"), 0.0)
    began = time.perf_counter()
    while drained < jobs:
        mark = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        rows: list[tuple[str, int, str]] = []
        for partition in range(64):
            if len(rows) >= SqliteStore.group_commit_changes:
                break
            rows += conn.execute(select, (partition,)).fetchall()
        mark = _step(steps, "read", mark)
        conn.executemany(
            insert,
            [(f"job:{i}", v + 1, event[0], event[1], event[2], h, h[::-1]) for i, v, h in rows],
        )
        mark = _step(steps, "insert", mark)
        ids = [r[0] for r in rows]
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            conn.execute(f"DELETE FROM jobs WHERE id IN ({', '.join('?' for _ in chunk)})", chunk)
        mark = _step(steps, "delete", mark)
        conn.execute("COMMIT")
        _step(steps, "commit", mark)
        commits += 1
        drained += len(rows)
    elapsed = time.perf_counter() - began
    conn.close()
    split = ", ".join(f"{k} {v / drained * 1e6:.1f}" for k, v in steps.items())
    print(
        f"  {label:32s} {drained / elapsed:9,.0f} jobs/s  ({commits} commits; µs/job: {split})",
        flush=True,
    )
    return drained / elapsed


def _step(steps: dict[str, float], name: str, since: float) -> float:
    now = time.perf_counter()
    steps[name] += now - since
    return now


async def write_variants(folder: Path, jobs: int) -> None:
    """The raw same writes with one thing changed at a time (`--writes`)."""
    await raw_same_writes(folder, jobs, label="SQLite defaults (2 MiB, ckpt 1k)", pragmas=())
    await raw_same_writes(folder, jobs, label="the store's settings")
    await raw_same_writes(folder, jobs, label="… without the 4 admin indexes", admin_indexes=False)
    await raw_same_writes(folder, jobs, label="… jobs WITHOUT ROWID", rowid=False)
    await raw_same_writes(folder, jobs, "NORMAL", label="… synchronous=NORMAL")


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--writes", action="store_true", help="only the raw same writes, one change at a time"
    )
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for round_no in range(1, args.rounds + 1):
        print(f"round {round_no}: {args.jobs:,} at-least-once no-op jobs", flush=True)
        with tempfile.TemporaryDirectory(prefix="jl-sqlite-drain-") as name:
            folder = Path(name)
            if args.writes:
                await write_variants(folder, args.jobs)
                continue
            engine = await engine_drain(folder, args.jobs, offload=True)
            inline = await engine_drain(folder, args.jobs, offload=False)
            same = await raw_same_writes(folder, args.jobs)
            await raw_same_writes(folder, args.jobs, "NORMAL")
            queue = raw_sqlite(folder, args.jobs, synchronous="FULL")
        print(
            f"  ratios: engine / raw same writes {engine / same:.3f},"
            f" inline / raw same writes {inline / same:.3f}, engine / raw queue {engine / queue:.4f}"
        )
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
