"""Statements an idle pod sends, by query, over a window (goal: ≤ 0.5/s in any 60 s).

What it runs is what users run: `jobledger.app.build(Settings(), store=PostgresStore(dsn, schema=...))` (what
`build(url=postgresql://...)` opens, on a fresh schema) and
`await app.start()` — the store, the lanes with their leases and heartbeats, the
schedule ticker, the stats projection, retention and the log archive, default settings
— on a fresh schema of the bench database. Nothing is enqueued.

Statements are counted at the driver: every `execute`/`executemany`/`copy` of every
psycopg connection in this process (the pool's and the LISTEN connection), by the
first words of its text. Counting at the driver needs no server extension
(pg_stat_statements must be in shared_preload_libraries) and also sees the LISTEN
connection's statements. The count starts after a settle period (the start's own
statements are reported apart) and covers `--seconds` of idling; the busiest `--window`
seconds inside it (every window that starts at a statement) are reported too.

The same-run baseline is the same window with the store open and its feed subscribed
but no runtime (bench/pg_idle.py measures that store alone over time).

    .venv/bin/python bench/idle_pod.py [--seconds 120] [--settle 2] [--window 60]
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import collections
import os
import re
import tempfile
import time
import uuid
from typing import Any

import psycopg
from pg_common import bench_dsn

from jobledger.app import build
from jobledger.config.settings import Settings
from jobledger.storage.postgres import PostgresStore

COUNTS: collections.Counter[str] = collections.Counter()
TIMES: list[float] = []  # monotonic time of every statement, for the sliding windows


def _label(query: Any) -> str:
    text = query if isinstance(query, str) else getattr(query, "as_string", lambda _: "")(None)
    if not isinstance(text, str):
        text = str(query)
    text = re.sub(r'"bench_[0-9a-f]+"\.|bench_[0-9a-f]+\.', "", " ".join(text.split()))
    return text[:90]


def install_counter() -> None:
    """Count every statement psycopg sends from this process."""
    cursor = psycopg.AsyncCursor
    for name in ("execute", "executemany"):
        original = getattr(cursor, name)

        def counted(self: Any, query: Any, *args: Any, _o: Any = original, **kw: Any) -> Any:
            COUNTS[_label(query)] += 1
            TIMES.append(time.monotonic())
            return _o(self, query, *args, **kw)

        setattr(cursor, name, counted)
    original_copy = cursor.copy

    def copy(self: Any, statement: Any, *args: Any, **kw: Any) -> Any:
        COUNTS[_label(statement)] += 1
        TIMES.append(time.monotonic())
        return original_copy(self, statement, *args, **kw)

    cursor.copy = copy  # type: ignore[method-assign]


def snapshot() -> collections.Counter[str]:
    return collections.Counter(COUNTS)


def busiest_window(began: float, ended: float, width: float) -> tuple[int, float]:
    """The most statements in any `width`-second window inside [began, ended], and where it
    starts (seconds after `began`). The busiest window starts at a statement (or at
    `began`), so those are the only starts tried."""
    times = [t for t in TIMES if began <= t <= ended]
    best, where = 0, 0.0
    for start in [began, *(t for t in times if t + width <= ended)]:
        count = bisect.bisect_right(times, start + width) - bisect.bisect_left(times, start)
        if count > best:
            best, where = count, start - began
    return best, where


def report(title: str, counts: collections.Counter[str], seconds: float) -> float:
    total = sum(counts.values())
    print(f"{title}: {total} statements in {seconds:.1f} s = {total / seconds:.3f} statements/s")
    for query, n in counts.most_common():
        print(f"  {n:6d}  {query}")
    return total / seconds


async def baseline(dsn: str, seconds: float) -> float:
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    store = PostgresStore(dsn, schema=schema)
    await store.open()
    feed = store.feed()
    waiting = asyncio.ensure_future(anext(feed))
    try:
        await asyncio.sleep(1.0)
        before = snapshot()
        await asyncio.sleep(seconds)
        rate = report(
            "baseline: store open, feed subscribed, no runtime", snapshot() - before, seconds
        )
    finally:
        waiting.cancel()
        await store.close()
        await _drop(dsn, schema)
    return rate


async def pod(dsn: str, seconds: float, settle: float, window: float) -> float:
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    with tempfile.TemporaryDirectory() as archive:
        settings = Settings(log_archive_dir=archive)
        # what build(settings, url=...) opens, on a schema of its own
        app = build(settings, store=PostgresStore(dsn, schema=schema))
        before = snapshot()
        began = time.perf_counter()
        await app.start()
        started = time.perf_counter() - began
        try:
            report(f"start (app.start() took {started * 1000:.0f} ms)", snapshot() - before, 1.0)
            await asyncio.sleep(settle)
            before = snapshot()
            began = time.monotonic()
            await asyncio.sleep(seconds)
            rate = report(
                "idle pod (build(Settings()) + app.start(), default settings)",
                snapshot() - before,
                seconds,
            )
            if seconds >= window:
                most, at = busiest_window(began, time.monotonic(), window)
                print(
                    f"busiest {window:.0f} s window of the idle pod: {most} statements"
                    f" = {most / window:.3f} statements/s (starting {at:.1f} s in)"
                )
        finally:
            await app.stop()
            await _drop(dsn, schema)
    return rate


async def _drop(dsn: str, schema: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--settle", type=float, default=2.0)
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--skip-baseline", action="store_true")
    args = parser.parse_args()
    install_counter()
    dsn = await bench_dsn()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    base = None if args.skip_baseline else await baseline(dsn, args.seconds)
    ours = await pod(dsn, args.seconds, args.settle, args.window)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if base is not None:
        print(f"idle pod {ours:.3f} statements/s; store alone {base:.3f}; goal <= 0.5")


if __name__ == "__main__":
    asyncio.run(main())
