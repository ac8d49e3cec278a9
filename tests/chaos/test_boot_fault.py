"""Pins a bug the chaos run found (docs/reliability.md, "Findings"), now fixed: a failed
boot stops everything it had started.

A worker whose PostgreSQL connection is terminated while it boots — during the schedule
boot sync, which `Runtime.start` runs after the lanes and the lease heartbeat have
started — gets the error out of `App.start()`. `App.stop()` then skips `Runtime.stop()`
(`App._started` was never set), so the lanes, the heartbeat and the feed keep running,
the store is closed under them, and the pod keeps its partitions until their leases
expire. In the chaos run the `jobledger worker` process then hung: up, holding nothing,
heartbeating nothing, and exiting -15 on SIGTERM (no handler was installed).

Reproduced here for real: a lock holds the schedules table, the app's blocked backend
is terminated with pg_terminate_backend.
"""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from jobledger.app import build
from jobledger.config.settings import Settings
from jobledger.core.clock import SystemClock
from jobledger.reactors.scheduler import SlotRun
from jobledger.storage.postgres import PostgresStore
from tests.factories.postgres import fresh_schema

pytestmark = pytest.mark.postgres


async def nightly(run: SlotRun) -> None:
    return None


async def test_a_boot_that_fails_in_the_schedule_sync_stops_what_it_started() -> None:
    async with fresh_schema() as (url, schema):
        peer = PostgresStore(url, schema=schema)
        await peer.open()  # creates the schema
        app = build(Settings(), store=PostgresStore(url, schema=schema), pod_id="boot-victim")
        app.scheduler.declare("nightly", "0 2 * * *", nightly)
        locker = await psycopg.AsyncConnection.connect(url)
        try:
            await locker.execute(f'LOCK TABLE "{schema}".schedules IN ACCESS EXCLUSIVE MODE')
            boot = asyncio.create_task(app.start())
            victim = None
            deadline = time.monotonic() + 20
            while victim is None and time.monotonic() < deadline:
                async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
                    cur = await admin.execute(
                        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                        " AND wait_event_type = 'Lock' AND query LIKE %s",
                        (f'%"{schema}".schedules%',),
                    )
                    found = await cur.fetchone()
                    if found:
                        victim = found[0]
                        await admin.execute("SELECT pg_terminate_backend(%s)", (victim,))
                await asyncio.sleep(0.05)
            assert victim is not None, "the boot sync never waited on the schedules lock"
            with pytest.raises(psycopg.OperationalError):
                await boot
            await locker.rollback()
            await app.stop()
            started = app.runtime is not None and app.runtime.started
            now = SystemClock().now()
            held = [
                lease.partition
                for lease in await peer.coordination.leases()
                if lease.owner == "boot-victim"
                and lease.lease_until is not None
                and lease.lease_until > now
            ]
        finally:
            await locker.close()
            if app.runtime is not None and app.runtime.started:
                await app.runtime.stop()  # clean up what App.stop left running
            await peer.close()
        assert not started, "the lanes of the failed boot are still running after App.stop()"
        assert held == [], f"the failed boot still holds {len(held)} partitions"
