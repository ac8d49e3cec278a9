"""The demo's tally reads outcomes from the store's log (cli/_demo_settle.py): jobs that
another app delivered on the same SQLite file count; jobs nobody ran do not."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

from jobledger import App
from jobledger.cli._demo_settle import Tally, follow
from jobledger.core.clock import FakeClock
from jobledger.domain.errors import DeadNow
from jobledger.domain.jobs import Job


def declare(app: App) -> None:
    @app.target("demo:ok", lane="fast")
    async def ok(job: Job) -> None:
        return None

    @app.target("demo:dead", lane="fast")
    async def dead(job: Job) -> None:
        raise DeadNow("closed account")


async def test_jobs_settled_by_another_app_count(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    producer = App(store=url, clock=FakeClock())
    producer.declare_target("demo:ok", lane="fast")
    producer.declare_target("demo:dead", lane="fast")
    await producer.start(workers=False)
    try:
        ids = []
        async with producer.transaction() as tx:
            for n in range(3):
                ids.append((await producer.enqueue("demo:ok", {"n": n}, tx=tx)).job_id)
            ids.append((await producer.enqueue("demo:dead", {}, tx=tx)).job_id)
        tally = await Tally.start(producer.pod.store, ids)
        await tally.poll()
        assert (tally.settled, tally.total) == (0, 4)

        worker = App(store=url, clock=FakeClock())  # delivers; the producer runs nothing
        declare(worker)
        try:
            await worker.run_until_idle()
        finally:
            await worker.stop()
        stop = asyncio.Event()
        assert await asyncio.wait_for(follow(tally, io.StringIO(), stop), 10)
        assert (tally.ok, tally.dead, tally.settled) == (3, 1, 4)
    finally:
        await producer.stop()


async def test_follow_returns_false_when_stopped_first(tmp_path: Path) -> None:
    app = App(store=f"sqlite:///{tmp_path / 'jobs.db'}", clock=FakeClock())
    app.declare_target("demo:ok", lane="fast")
    await app.start(workers=False)
    try:
        async with app.transaction() as tx:
            job = await app.enqueue("demo:ok", {}, tx=tx)
        tally = await Tally.start(app.pod.store, [job.job_id])
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.3, stop.set)
        assert not await asyncio.wait_for(follow(tally, io.StringIO(), stop), 10)
        assert tally.settled == 0
    finally:
        await app.stop()
