"""A deploy does not park long-lane jobs: SIGINT on a real `jobledger worker` (SQLite
file, PostgreSQL) running long jobs that outlive its `stop_timeout_s`.

The at-least-once row is given back (PENDING, attempts unchanged, claim released, due
now) and a second worker starts it at once, not after the 5-minute claim lease; the
at-most-once row keeps its claim (its run may have had its effect). A second SIGINT
during a stop says in one line what it abandons and exits at once.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from jobledger.config.settings import Settings
from jobledger.core.clock import SystemClock
from jobledger.domain.jobs import JobStatus
from jobledger.engine import Engine
from jobledger.storage.urls import open_store
from tests.integration import multiprocess_app
from tests.integration.test_multiprocess_lanes import (
    Workers,
    deliveries,
    store_url,
    wait_until,
)

pytestmark = pytest.mark.slow

STOP_TIMEOUT_S = 2.0
#: interpreter start and teardown, a busy machine
MARGIN_S = 5.0


@pytest.fixture(params=["sqlite", "postgres"])
def kind(request: pytest.FixtureRequest) -> str:
    if request.param == "postgres":
        request.applymarker(pytest.mark.postgres)
    return str(request.param)


async def test_sigint_gives_the_long_job_back_and_a_second_sigint_abandons_in_one_line(
    kind: str, tmp_path: Path
) -> None:
    out = tmp_path / "out.jsonl"
    async with store_url(kind, tmp_path) as url:
        store = open_store(url)
        await store.open()
        engine = Engine(store, settings=Settings())
        multiprocess_app.setup(engine)
        workers = Workers(
            url,
            out,
            0.0,
            LANES_LONG_DELAY_S="600",  # every long run outlives the stop
            JOBLEDGER_STOP_TIMEOUT_S=str(STOP_TIMEOUT_S),
            JOBLEDGER_LONG_LEASE_S="300",  # the default: a lease wait would show
            JOBLEDGER_LONG_HEARTBEAT_S="60",
        )
        try:
            first = workers.spawn("first", tmp_path / "first.log")
            async with engine.transaction() as tx:
                alo = (await engine.enqueue("mp:long", {"n": 1}, tx=tx)).job_id
                amo = (await engine.enqueue("mp:long_amo", {"n": 2}, tx=tx)).job_id
            assert alo is not None and amo is not None

            async def both_running() -> bool:
                return {d["id"] for d in deliveries(out)} == {alo, amo}

            await wait_until(both_running, 60, "the first worker to run both long jobs")
            claim = await store.admin.get_job(alo)
            assert claim is not None and claim.status == JobStatus.RUNNING

            first.send_signal(signal.SIGINT)
            code = await asyncio.to_thread(first.wait, STOP_TIMEOUT_S + MARGIN_S)
            log = (tmp_path / "first.log").read_text(errors="replace")
            assert code == 0, log[-3000:]

            given = await store.admin.get_job(alo)
            assert given is not None and given.status == JobStatus.PENDING, log[-3000:]
            assert given.attempts == claim.attempts == 0
            assert given.claim_token is None and given.claimed_by is None
            assert given.lease_until is None and given.next_run_at <= SystemClock().now()
            last = (await store.log.read_stream(given.stream))[-1]
            assert (last.type, last.data["reason"]) == ("JobRequeued", "stopped")
            kept = await store.admin.get_job(amo)
            assert kept is not None and kept.status == JobStatus.RUNNING
            assert kept.claimed_by == "first"

            started = time.monotonic()
            second = workers.spawn("second", tmp_path / "second.log")

            async def rerun() -> bool:
                return [d["id"] for d in deliveries(out)].count(alo) == 2

            await wait_until(rerun, 60, "the second worker to run the job again")
            # at once: its boot and one reserve, far from the 300 s claim lease
            assert time.monotonic() - started < 30
            assert [d["id"] for d in deliveries(out)].count(amo) == 1

            second.send_signal(signal.SIGINT)
            await asyncio.sleep(0.3)  # the stop waits for the run (up to 1.4 s)
            second.send_signal(signal.SIGINT)
            code = await asyncio.to_thread(second.wait, MARGIN_S)
            log = (tmp_path / "second.log").read_text(errors="replace")
            assert code == 128 + signal.SIGINT, log[-3000:]
            lines = [line for line in log.splitlines() if "second interrupt" in line]
            assert lines == [
                "second interrupt: abandoning 1 running job (1 at-least-once will be"
                " redelivered once another pod finds this one gone); exiting now"
            ], log[-3000:]
        finally:
            for proc in workers.procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            await store.close()
