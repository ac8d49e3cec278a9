"""Sync enqueue on the caller's own `sqlite3.Connection` / psycopg `Connection`,
against a running pod on SQLite and on PostgreSQL.

The sync code runs in a thread (as a Flask or Django view would), the pod on the event
loop. Rolled back: nothing exists. Committed: the pod delivers it, woken by the commit.
The input rules, dedupe and results are the async path's.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jobledger import App
from jobledger.domain.errors import ConfigError, InvalidArgument, JobledgerError, UnknownTarget
from jobledger.domain.jobs import NewJob
from jobledger.engine import Enqueued
from jobledger.integrations import sync
from jobledger.storage.sqlite import SqliteStore
from tests.contract.writes.test_enqueue_input import BAD
from tests.integration.sync_kit import FAST, LONG, SETTINGS, SyncKit, running
from tests.stores import all_jobs


class Boom(Exception):
    pass


@pytest.fixture(params=["sqlite", "postgres"])
async def kit(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SyncKit]:
    async with running(request.param, tmp_path) as started:
        yield started


async def test_a_committed_enqueue_is_delivered_by_the_running_pod(kit: SyncKit) -> None:
    def signup() -> Enqueued:
        with kit.transaction() as conn:
            kit.insert_user(conn, "ada")
            return sync.enqueue(kit.app, conn, LONG, {"user": "ada"}, key="user:ada")

    job = await asyncio.to_thread(signup)
    assert job.inserted and job.job_id is not None
    await kit.app.wait_done(job.job_id, timeout_s=10)  # the safety poll is a minute away
    assert kit.delivered == [{"user": "ada"}]
    assert kit.users() == ["ada"]
    events = await kit.app.pod.store.log.read_stream(f"job:{job.job_id}")
    assert events[0].type == "JobEnqueued" and events[-1].type == "JobSucceeded"


async def test_a_fast_lane_job_is_delivered_too(kit: SyncKit) -> None:
    def enqueue() -> list[Enqueued]:
        with kit.transaction() as conn:
            items = [NewJob(FAST, {"n": n}, key="k", version=n) for n in range(3)]
            return sync.enqueue_many(kit.app, conn, items)

    jobs = await asyncio.to_thread(enqueue)
    await kit.app.wait_done(*(j.job_id for j in jobs), timeout_s=10)
    assert kit.delivered == [{"n": 0}, {"n": 1}, {"n": 2}]  # per-key order (by version)


async def test_a_rolled_back_transaction_leaves_no_job_and_no_row(kit: SyncKit) -> None:
    def signup() -> None:
        with kit.transaction() as conn:
            kit.insert_user(conn, "bob")
            assert sync.enqueue(kit.app, conn, LONG, {"user": "bob"}, dedupe_key="u-bob").inserted
            raise Boom

    with pytest.raises(Boom):
        await asyncio.to_thread(signup)
    store = kit.app.pod.store
    assert await all_jobs(store) == [] and await store.log.read_log(0, limit=10) == []
    assert kit.users() == []
    # the rolled-back key is free again
    again = await asyncio.to_thread(_enqueue_committed, kit, {"dedupe_key": "u-bob"})
    assert again.inserted


def _enqueue_committed(kit: SyncKit, options: dict[str, Any]) -> Enqueued:
    with kit.transaction() as conn:
        return sync.enqueue(kit.app, conn, FAST, {"v": 1}, **options)


async def test_a_dedupe_hit_returns_the_holders_id_in_and_across_transactions(
    kit: SyncKit,
) -> None:
    first = await asyncio.to_thread(_enqueue_committed, kit, {"dedupe_key": "order-7"})

    def twice() -> tuple[Enqueued, Enqueued, Enqueued]:
        with kit.transaction() as conn:
            again = sync.enqueue(kit.app, conn, FAST, {"v": 2}, dedupe_key="order-7")
            fresh = sync.enqueue(kit.app, conn, FAST, {"v": 3}, dedupe_key="order-8")
            repeat = sync.enqueue(kit.app, conn, FAST, {"v": 4}, dedupe_key="order-8")
            return again, fresh, repeat

    again, fresh, repeat = await asyncio.to_thread(twice)
    assert first.inserted and fresh.inserted
    assert (again.inserted, again.job_id) == (False, first.job_id)
    assert (repeat.inserted, repeat.job_id) == (False, fresh.job_id)


@pytest.mark.parametrize(("case", "given", "error", "says"), BAD, ids=[b[0] for b in BAD])
async def test_bad_input_is_refused_as_on_the_async_path_and_the_caller_commits(
    kit: SyncKit, case: str, given: dict[str, Any], error: type[JobledgerError], says: str
) -> None:
    engine = kit.app.engine
    engine.settings = dataclasses.replace(engine.settings, max_payload_bytes=1000)
    options = {"payload": {"ok": 1}, **given}

    def enqueue() -> Enqueued:
        with kit.transaction() as conn:
            kit.insert_user(conn, "still mine")
            with pytest.raises(error, match=says):
                sync.enqueue(kit.app, conn, FAST, **options)
            return sync.enqueue(kit.app, conn, FAST, {"ok": 2})

    assert (await asyncio.to_thread(enqueue)).inserted
    assert kit.users() == ["still mine"]
    log = await kit.app.pod.store.log.read_log(0, limit=10)  # the pod may have run it since
    assert [e.type for e in log].count("JobEnqueued") == 1


async def test_an_unknown_target_is_refused_before_anything_is_written(kit: SyncKit) -> None:
    def enqueue() -> None:
        with kit.transaction() as conn:
            with pytest.raises(UnknownTarget, match="nope"):
                sync.enqueue_many(kit.app, conn, [NewJob(FAST, {"n": 1}), NewJob("nope")])
            kit.insert_user(conn, "kept")

    await asyncio.to_thread(enqueue)
    assert await kit.app.pod.store.log.read_log(0, limit=10) == []
    assert kit.users() == ["kept"]


async def test_a_connection_to_another_database_or_in_autocommit_is_refused(
    kit: SyncKit, tmp_path: Path
) -> None:
    def refused() -> None:
        if kit.name == "sqlite":
            import sqlite3

            other = sqlite3.connect(tmp_path / "other.db")
            with pytest.raises(ConfigError, match="same database"):
                sync.enqueue(kit.app, other, FAST)
            other.close()
            idle = sqlite3.connect(tmp_path / "shop.db", isolation_level=None)
        else:
            idle = kit.connect()
            idle.autocommit = True
        with pytest.raises(InvalidArgument, match="inside a transaction"):
            sync.enqueue(kit.app, idle, FAST)
        idle.close()

    await asyncio.to_thread(refused)
    assert await kit.app.pod.store.log.read_log(0, limit=10) == []


async def test_an_enqueue_only_app_that_never_started_enqueues_for_the_workers(
    kit: SyncKit,
) -> None:
    """The web process's shape: its own App declares the target without a handler, is
    never started (no store connection of its own), and enqueues on the caller's
    connection; the workers' pod delivers."""
    store = kit.app.pod.store
    if isinstance(store, SqliteStore):
        web = App(store=f"sqlite:///{store.path}", settings=SETTINGS)
    else:
        from jobledger.storage.postgres import PostgresStore

        assert isinstance(store, PostgresStore)
        web = App(store=PostgresStore(store.dsn, schema=store.schema), settings=SETTINGS)
    web.declare_target(LONG, lane="long")

    def signup() -> Enqueued:
        with kit.transaction() as conn:
            kit.insert_user(conn, "eve")
            return sync.enqueue(web, conn, LONG, {"user": "eve"})

    job = await asyncio.to_thread(signup)
    assert job.job_id is not None
    await kit.app.wait_done(job.job_id, timeout_s=10)
    assert kit.delivered == [{"user": "eve"}] and kit.users() == ["eve"]


async def test_a_lossy_target_is_refused_before_anything_is_written(kit: SyncKit) -> None:
    async def drop(job: Any) -> None:
        return None

    kit.app.engine.targets.register("lossy:ping", "fast", drop, lossy=True)

    def enqueue() -> None:
        with kit.transaction() as conn:
            with pytest.raises(InvalidArgument, match="lossy"):
                sync.enqueue_many(kit.app, conn, [NewJob(FAST), NewJob("lossy:ping")])
            kit.insert_user(conn, "kept")

    await asyncio.to_thread(enqueue)
    assert await kit.app.pod.store.log.read_log(0, limit=10) == []
    assert kit.users() == ["kept"]


async def test_a_psycopg_connection_that_cannot_reach_the_store_leaves_the_transaction_usable(
    tmp_path: Path,
) -> None:
    """Another database, or the store's schema without its tables: refused before any
    statement of jobledger's runs, so the caller's transaction is not aborted (a failed
    statement aborted it, and its commit then silently rolled the caller's rows back)."""
    import psycopg

    from jobledger.storage.postgres import PostgresStore
    from tests.factories.postgres import dsn

    async with running("postgres", tmp_path) as kit:
        store = kit.app.pod.store
        assert isinstance(store, PostgresStore)
        bare = App(store=PostgresStore(store.dsn, schema=f"{store.schema}_none"), settings=SETTINGS)
        bare.declare_target(FAST, lane="fast")

        def refused() -> None:
            with psycopg.connect(dsn()) as other:  # the server's own database, not the store's
                other.execute("CREATE TEMP TABLE mine (x int)")
                with pytest.raises(ConfigError, match="database"):
                    sync.enqueue(kit.app, other, FAST)
                other.execute("INSERT INTO mine VALUES (1)")  # still usable
            with kit.transaction() as conn:
                kit.insert_user(conn, "kept")
                with pytest.raises(ConfigError, match="no jobledger tables"):
                    sync.enqueue(bare, conn, FAST)
                kit.insert_user(conn, "kept too")

        await asyncio.to_thread(refused)
        assert kit.users() == ["kept", "kept too"]
        assert await store.log.read_log(0, limit=10) == []


async def test_versions_count_in_the_callers_transaction_and_order_its_jobs(
    kit: SyncKit,
) -> None:
    def order_event(n: int, *, fail: bool = False) -> int:
        with kit.transaction() as conn:
            kit.insert_user(conn, f"u{n}")
            version = sync.next_version(kit.app, conn, "order-1")
            sync.enqueue(kit.app, conn, FAST, {"n": n}, key="order-1", version=version)
            if fail:
                raise Boom
            return version

    assert [await asyncio.to_thread(order_event, n) for n in range(3)] == [1, 2, 3]
    with pytest.raises(Boom):
        await asyncio.to_thread(order_event, 99, fail=True)
    assert await asyncio.to_thread(order_event, 3) == 4  # the rolled-back 4 is given again
    jobs = await all_jobs(kit.app.pod.store)
    await kit.app.wait_done(*(j.id for j in jobs), timeout_s=10)
    assert kit.delivered == [{"n": 0}, {"n": 1}, {"n": 2}, {"n": 3}]


async def test_next_version_refuses_a_bad_key_before_anything_is_written(kit: SyncKit) -> None:
    def ask() -> None:
        with kit.transaction() as conn, pytest.raises(InvalidArgument, match="key"):
            sync.next_version(kit.app, conn, "")

    await asyncio.to_thread(ask)
