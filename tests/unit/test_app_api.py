"""The application API's edges: typed options a type checker checks, clear one-line
mistakes (a lane typo, an enqueue before the store is open, a naive `run_at`), `run_at`
as a delay, `wait_done`'s final status, `cancel` in the caller's transaction, the
package's exports and `python -m jobledger`."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import jobledger
from jobledger import App, InvalidArgument, InvalidStatus, Job, JobStatus
from jobledger.domain.errors import ConfigError
from jobledger.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def _url(tmp_path: Path, store: str = "sqlite") -> str:
    return f"sqlite:///{tmp_path / 'app.db'}" if store == "sqlite" else "memory://"


def _app(tmp_path: Path, store: str = "sqlite") -> App:
    return App(store=_url(tmp_path, store), clock=FakeClock(T0))


def test_a_misspelt_option_is_caught_by_the_type_checker(tmp_path: Path) -> None:
    """`**options: Any` let `dedup_key=` through to run time (or, on the helpers, into a
    NewJob); every entry point now names its options."""
    snippet = tmp_path / "snippet.py"
    snippet.write_text(
        "from typing import Any\n"
        "import jobledger\n"
        "from jobledger.integrations import django, sqlalchemy, sync\n\n"
        "async def f(app: jobledger.App, tx: Any) -> None:\n"
        "    await app.enqueue('t', {}, tx=tx, dedup_key='x')\n"
        "    app.enqueue_sync('t', {}, tx=tx, dedup_key='x')\n"
        "    sync.enqueue(app, tx, 't', {}, dedup_key='x')\n"
        "    sqlalchemy.enqueue(app, tx, 't', {}, dedup_key='x')\n"
        "    await sqlalchemy.enqueue_async(app, tx, 't', {}, dedup_key='x')\n"
        "    django.enqueue(app, 't', {}, dedup_key='x')\n"
        "    await app.enqueue_many([jobledger.NewJob('t', {}, dedup_key='x')], tx=tx)\n",
        encoding="utf-8",
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--cache-dir",
            str(tmp_path / "cache"),
            str(snippet),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    misspelt = [line for line in done.stdout.splitlines() if 'keyword argument "dedup_key"' in line]
    assert len(misspelt) == 7, done.stdout


async def test_a_lane_typo_names_the_target_and_the_valid_lanes_where_it_is_declared(
    tmp_path: Path,
) -> None:
    app = _app(tmp_path)
    with pytest.raises(InvalidArgument) as refused:
        app.target("mail:welcome", lane="fats")
    assert str(refused.value) == ("target 'mail:welcome': lane 'fats' is not one of 'fast', 'long'")
    with pytest.raises(InvalidArgument, match="delivery_mode 'at_least_one' is not one of"):
        app.target("mail:welcome", delivery_mode="at_least_one")


@pytest.mark.parametrize("store", ["sqlite", "memory"])
async def test_enqueue_before_the_store_is_open_says_how_to_open_it(
    tmp_path: Path, store: str
) -> None:
    app = _app(tmp_path, store)
    app.register("t", "fast", lambda job: None)
    with pytest.raises(ConfigError) as refused:
        async with app.transaction() as tx:
            await app.enqueue("t", None, tx=tx)
    message = str(refused.value)
    assert "async with app" in message and "await app.start()" in message
    assert "\n" not in message


async def test_run_at_takes_a_delay_and_refuses_a_naive_time_with_the_cure(
    tmp_path: Path,
) -> None:
    app = _app(tmp_path)
    app.register("t", "long", lambda job: None)
    async with app.testing(store=f"sqlite:///{tmp_path / 'test.db'}", clock=FakeClock(T0)) as t:
        async with app.transaction() as tx:
            later = await app.enqueue("t", None, tx=tx, run_at=timedelta(minutes=5))
            with pytest.raises(InvalidArgument) as naive:
                await app.enqueue("t", None, tx=tx, run_at=datetime(2030, 1, 1))
        assert "timedelta" in str(naive.value) and "time zone" in str(naive.value)
        job = await t.store.admin.get_job(later.job_id)
        assert job is not None and job.next_run_at == T0 + timedelta(minutes=5)
        assert (await t.run_until_idle()).total == 0
        t.clock.advance(minutes=5)
        assert (await t.run_until_idle()).ok == 1


async def test_wait_done_returns_how_each_job_ended_and_names_a_dead_one(
    tmp_path: Path,
) -> None:
    app = App(store=f"sqlite:///{tmp_path / 'app.db'}")

    @app.target("ok", lane="fast")
    async def ok(job: Job) -> None:
        return None

    @app.target("doomed", lane="fast")
    async def doomed(job: Job) -> None:
        raise jobledger.DeadNow("the receiver refuses this message")

    async with app:
        async with app.transaction() as tx:
            good = await app.enqueue("ok", None, tx=tx)
            bad = await app.enqueue("doomed", None, tx=tx)
        assert (await app.wait_done(good.job_id, timeout_s=20)).status == "SUCCEEDED"
        done = await app.wait_done(good.job_id, bad.job_id, timeout_s=20)
    assert done.statuses == {good.job_id: "SUCCEEDED", bad.job_id: "DEAD"}
    assert done.dead == [bad.job_id]


@pytest.mark.parametrize("store", ["sqlite", "memory"])
async def test_cancel_in_the_callers_transaction_commits_and_rolls_back_with_it(
    tmp_path: Path, store: str
) -> None:
    app = _app(tmp_path, store)
    app.register("t", "long", lambda job: None)
    async with app.testing(store=_url(tmp_path, store)) as t:
        async with app.transaction() as tx:
            job_id = (await app.enqueue("t", None, tx=tx)).job_id
        assert job_id is not None

        class Rollback(Exception):
            pass

        with pytest.raises(Rollback):
            async with app.transaction() as tx:
                await app.cancel(job_id, tx=tx)
                raise Rollback
        row = await t.store.admin.get_job(job_id)
        assert row is not None and row.status == JobStatus.PENDING

        async with app.transaction() as tx:
            await app.cancel(job_id, tx=tx)
        assert await t.store.admin.get_job(job_id) is None
        assert (await app.wait_done(job_id)).status == "CANCELLED"
        with pytest.raises(jobledger.NotFound):
            async with app.transaction() as tx:
                await app.cancel(job_id, tx=tx)


async def test_cancel_refuses_a_running_job_and_the_transaction_goes_on(tmp_path: Path) -> None:
    app = _app(tmp_path)
    app.register("t", "long", lambda job: None)
    async with app.testing(store=f"sqlite:///{tmp_path / 't.db'}") as t:
        async with app.transaction() as tx:
            job_id = (await app.enqueue("t", None, tx=tx)).job_id
        assert job_id is not None
        (claimed,) = await t.pod.runtime.long.reserve()  # RUNNING under a claim
        assert claimed.id == job_id
        async with app.transaction() as tx:
            with pytest.raises(InvalidStatus, match="RUNNING"):
                await app.cancel(job_id, tx=tx)
            other = await app.enqueue("t", None, tx=tx)  # the transaction is usable
        assert other.inserted and await t.store.admin.get_job(other.job_id or "") is not None


def test_the_package_exports_what_an_application_uses() -> None:
    for name in ("App", "Job", "NewJob", "Enqueued", "Done", "JobStatus", "JobledgerError"):
        assert name in jobledger.__all__ and hasattr(jobledger, name)
    for error in ("InvalidArgument", "InvalidPayload", "InvalidStatus", "ConfigError", "NotFound"):
        assert issubclass(getattr(jobledger, error), jobledger.JobledgerError)
    from jobledger.testing import FakeClock as Exported

    assert Exported is FakeClock


def test_python_dash_m_runs_the_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "jobledger", "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and done.stdout.startswith("usage: jobledger")
