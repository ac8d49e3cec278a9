"""`jobledger.integrations.sqlalchemy` against the real SQLAlchemy (sync), on SQLite
(pysqlite) and PostgreSQL (psycopg 3), with a running pod."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy import String, create_engine, text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from jobledger.engine import Enqueued
from jobledger.integrations import sqlalchemy as jobs
from jobledger.observability.observe import Observer
from tests.integration.sync_kit import FAST, LONG, SyncKit, each_refused, running


class Boom(Exception):
    pass


class Base(DeclarativeBase):
    pass


class User(Base):
    __tablename__ = "users"
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(40))


@pytest.fixture(params=["sqlite", "postgres"])
async def kit(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SyncKit]:
    async with running(request.param, tmp_path) as started:
        yield started


@pytest.fixture
def db(kit: SyncKit) -> Iterator[Engine]:
    """A SQLAlchemy engine on the kit's database; `users` mapped into its table."""
    schema = kit.table.rpartition(".")[0].strip('"') or None
    options = {"schema_translate_map": {None: schema}} if schema else {}
    engine = create_engine(kit.url, execution_options=options)
    with engine.begin() as conn:
        conn.execute(text(f"ALTER TABLE {kit.table} ADD COLUMN id integer"))
    yield engine
    engine.dispose()


async def test_a_session_commit_delivers_the_job_and_a_rollback_leaves_nothing(
    kit: SyncKit, db: Engine
) -> None:
    def rolled_back() -> None:
        with Session(db) as session, session.begin():
            session.add(User(id=1, name="bob"))
            session.flush()
            assert jobs.enqueue(kit.app, session, LONG, {"user": 1}).inserted
            raise Boom

    with pytest.raises(Boom):
        await asyncio.to_thread(rolled_back)
    assert await kit.app.pod.store.log.read_log(0, limit=10) == [] and kit.users() == []

    def committed() -> Enqueued:
        with Session(db) as session, session.begin():
            session.add(User(id=2, name="ada"))
            return jobs.enqueue(kit.app, session, LONG, {"user": 2}, dedupe_key="user:2")

    job = await asyncio.to_thread(committed)
    assert job.job_id is not None
    await kit.app.wait_done(job.job_id, timeout_s=10)
    assert kit.delivered == [{"user": 2}] and kit.users() == ["ada"]
    again = await asyncio.to_thread(committed_again, kit, db)
    assert (again.inserted, again.job_id) == (False, job.job_id)


def committed_again(kit: SyncKit, db: Engine) -> Enqueued:
    with Session(db) as session:  # commit() by hand, no begin(): the session autobegins
        result = jobs.enqueue(kit.app, session, LONG, {"user": 2}, dedupe_key="user:2")
        session.commit()
    return result


async def test_a_connection_commits_and_rolls_back_the_job_with_its_own_rows(
    kit: SyncKit, db: Engine
) -> None:
    def work() -> Enqueued:
        with db.connect() as conn:  # the job first: enqueue begins the transaction
            kept = jobs.enqueue(kit.app, conn, FAST, {"n": 1})
            conn.execute(text(f"INSERT INTO {kit.table} (id, name) VALUES (1, 'kept')"))
            conn.commit()
            jobs.enqueue(kit.app, conn, FAST, {"n": 2})
            conn.execute(text(f"INSERT INTO {kit.table} (id, name) VALUES (2, 'gone')"))
            conn.rollback()
        return kept

    kept = await asyncio.to_thread(work)
    assert kept.job_id is not None
    await kit.app.wait_done(kept.job_id, timeout_s=10)
    assert kit.delivered == [{"n": 1}] and kit.users() == ["kept"]
    enqueued = [
        e for e in await kit.app.pod.store.log.read_log(0, limit=20) if e.type == "JobEnqueued"
    ]
    assert [e.stream for e in enqueued] == [f"job:{kept.job_id}"]


async def test_bad_input_raises_before_any_write_and_the_session_goes_on(
    kit: SyncKit, db: Engine
) -> None:
    def work() -> None:
        with Session(db) as session, session.begin():
            each_refused(lambda *args, **options: jobs.enqueue(kit.app, session, *args, **options))
            session.add(User(id=3, name="still mine"))

    await asyncio.to_thread(work)
    assert kit.users() == ["still mine"]
    assert await kit.app.pod.store.log.read_log(0, limit=10) == []


def test_anything_but_a_session_or_a_connection_is_refused() -> None:
    with pytest.raises(TypeError, match="Session or Connection"):
        jobs.driver_connection(object())  # type: ignore[arg-type]


async def test_the_enqueue_metrics_of_a_session_wait_for_its_commit(
    kit: SyncKit, db: Engine
) -> None:
    """Counted at the session's commit; a rolled-back savepoint drops its own jobs' count,
    and a rolled-back session all of them (jobs released from a savepoint included)."""
    seen: list[tuple[str, int]] = []

    class Recorder(Observer):
        def enqueued(self, target: str, count: int) -> None:
            seen.append((target, count))

    kit.app.engine.observers.add(Recorder())

    def committed() -> list[tuple[str, int]]:
        with Session(db) as session, session.begin():
            jobs.enqueue(kit.app, session, FAST, {"n": 1})
            with pytest.raises(Boom), session.begin_nested():
                jobs.enqueue(kit.app, session, LONG, {"n": 2})
                raise Boom
            with session.begin_nested():
                jobs.enqueue(kit.app, session, FAST, {"n": 3})
            before_commit = list(seen)
        return before_commit

    def rolled_back() -> None:
        with Session(db) as session:
            # the transaction begins before the savepoint: pysqlite would otherwise take
            # SAVEPOINT for the transaction and RELEASE for its commit (docs/sync-callers.md)
            jobs.enqueue(kit.app, session, LONG, {"n": 4})
            with session.begin_nested():
                jobs.enqueue(kit.app, session, LONG, {"n": 5})
            session.rollback()
            session.commit()  # nothing left to count

    assert await asyncio.to_thread(committed) == []
    assert seen == [(FAST, 1), (FAST, 1)]
    await asyncio.to_thread(rolled_back)
    assert seen == [(FAST, 1), (FAST, 1)]
    enqueued = [
        e for e in await kit.app.pod.store.log.read_log(0, limit=50) if e.type == "JobEnqueued"
    ]
    assert sorted(e.data["payload"]["n"] for e in enqueued) == [1, 3]


async def test_next_version_counts_in_the_sessions_transaction(kit: SyncKit, db: Engine) -> None:
    def ask(fail: bool = False) -> int:
        with Session(db) as session, session.begin():
            version = jobs.next_version(kit.app, session, "order-2")
            if fail:
                raise Boom
            return version

    assert await asyncio.to_thread(ask) == 1
    with pytest.raises(Boom):
        await asyncio.to_thread(ask, True)
    assert await asyncio.to_thread(ask) == 2
