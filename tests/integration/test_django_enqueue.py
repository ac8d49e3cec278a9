"""`jobledger.integrations.django` against the real Django (configured here with
`settings.configure()`), on SQLite and on PostgreSQL, with a running pod.
Django's code runs in a thread, as a view would; its connections are closed at the end
of each call."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TypeVar

import pytest
from django.db import connections, transaction

from jobledger.domain.errors import InvalidArgument
from jobledger.engine import Enqueued
from jobledger.integrations import django as jobs
from jobledger.observability.observe import Observer
from tests.integration.sync_kit import (
    FAST,
    LONG,
    SyncKit,
    configure_django,
    each_refused,
    running,
)

T = TypeVar("T")


class Boom(Exception):
    pass


@pytest.fixture(params=["sqlite", "postgres"])
async def kit(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SyncKit]:
    configure_django()
    async with running(request.param, tmp_path) as started:
        if started.name == "sqlite":
            connections.settings["default"]["NAME"] = str(tmp_path / "shop.db")
        yield started


def alias(kit: SyncKit) -> str:
    return "default" if kit.name == "sqlite" else "pg"


async def in_django(fn: Callable[[], T]) -> T:
    """`fn()` in a thread, as a Django view runs; that thread's connections closed."""

    def call() -> T:
        try:
            return fn()
        finally:
            connections.close_all()

    return await asyncio.to_thread(call)


def insert_user(kit: SyncKit, name: str) -> None:
    with connections[alias(kit)].cursor() as cursor:
        cursor.execute(f"INSERT INTO {kit.table} (name) VALUES (%s)", [name])


async def test_a_committed_atomic_block_is_delivered_and_a_rolled_back_one_leaves_nothing(
    kit: SyncKit,
) -> None:
    using = alias(kit)

    def rolled_back() -> None:
        with transaction.atomic(using=using):
            insert_user(kit, "bob")
            assert jobs.enqueue(kit.app, LONG, {"user": "bob"}, using=using).inserted
            raise Boom

    with pytest.raises(Boom):
        await in_django(rolled_back)
    assert await kit.app.pod.store.log.read_log(0, limit=10) == [] and kit.users() == []

    def committed() -> Enqueued:
        with transaction.atomic(using=using):
            insert_user(kit, "ada")
            return jobs.enqueue(kit.app, LONG, {"user": "ada"}, using=using, dedupe_key="ada")

    job = await in_django(committed)
    assert job.job_id is not None
    await kit.app.wait_done(job.job_id, timeout_s=10)
    assert kit.delivered == [{"user": "ada"}] and kit.users() == ["ada"]
    again = await in_django(committed)  # a second signup of ada: the same job
    assert (again.inserted, again.job_id) == (False, job.job_id)


async def test_an_inner_block_rolled_back_drops_its_job_and_the_outer_commits(
    kit: SyncKit,
) -> None:
    using = alias(kit)

    def work() -> Enqueued:
        with transaction.atomic(using=using):
            insert_user(kit, "outer")
            kept = jobs.enqueue(kit.app, FAST, {"n": 1}, using=using)
            with pytest.raises(Boom), transaction.atomic(using=using):
                jobs.enqueue(kit.app, FAST, {"n": 2}, using=using)
                raise Boom
        return kept

    kept = await in_django(work)
    assert kept.job_id is not None
    await kit.app.wait_done(kept.job_id, timeout_s=10)
    assert kit.delivered == [{"n": 1}] and kit.users() == ["outer"]
    log = await kit.app.pod.store.log.read_log(0, limit=20)
    assert [e.stream for e in log if e.type == "JobEnqueued"] == [f"job:{kept.job_id}"]


async def test_outside_atomic_the_enqueue_is_its_own_transaction(kit: SyncKit) -> None:
    job = await in_django(lambda: jobs.enqueue(kit.app, FAST, {"n": 1}, using=alias(kit)))
    assert job.job_id is not None
    await kit.app.wait_done(job.job_id, timeout_s=10)
    assert kit.delivered == [{"n": 1}]


async def test_bad_input_raises_before_any_write_and_the_block_goes_on(kit: SyncKit) -> None:
    using = alias(kit)

    def work() -> None:
        with transaction.atomic(using=using):
            each_refused(
                lambda *args, **options: jobs.enqueue(kit.app, *args, using=using, **options)
            )
            insert_user(kit, "still mine")

    await in_django(work)
    assert kit.users() == ["still mine"]
    assert await kit.app.pod.store.log.read_log(0, limit=10) == []


async def test_the_enqueue_metrics_count_after_the_commit_only(kit: SyncKit) -> None:
    using = alias(kit)
    seen: list[tuple[str, int]] = []

    class Recorder(Observer):
        def enqueued(self, target: str, count: int) -> None:
            seen.append((target, count))

    kit.app.engine.observers.add(Recorder())

    def rolled_back() -> None:
        with transaction.atomic(using=using):
            jobs.enqueue(kit.app, FAST, {"n": 1}, using=using)
            raise Boom

    def committed() -> list[tuple[str, int]]:
        with transaction.atomic(using=using):
            jobs.enqueue(kit.app, FAST, {"n": 2}, using=using)
            before_commit = list(seen)
        return before_commit

    with pytest.raises(Boom):
        await in_django(rolled_back)
    assert seen == []
    assert await in_django(committed) == []
    assert seen == [(FAST, 1)]


async def test_next_version_counts_inside_atomic_and_is_refused_outside(kit: SyncKit) -> None:
    using = alias(kit)

    def ask() -> int:
        with transaction.atomic(using=using):
            return jobs.next_version(kit.app, "order-3", using=using)

    assert [await in_django(ask), await in_django(ask)] == [1, 2]
    with pytest.raises(InvalidArgument, match=r"transaction\.atomic"):
        await in_django(lambda: jobs.next_version(kit.app, "order-3", using=using))
