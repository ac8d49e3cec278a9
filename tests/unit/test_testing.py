"""`App.testing`: a test runs the module's own app — its targets and schedules as
declared — on a store and clock of the test's, and `run_until_idle` reports each run
with the exception a failed one raised."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from jobledger import App, Job
from jobledger.domain.errors import ConfigError
from jobledger.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


class SmtpDown(Exception):
    pass


@dataclass
class Welcome:
    user: int


def module_app(tmp_path: Path) -> tuple[App, list[int]]:
    """What an application module declares, once, at import."""
    app = App(store=f"sqlite:///{tmp_path / 'production.db'}")
    sent: list[int] = []

    @app.target("mail:welcome", lane="long", delivery_mode="at_least_once")
    def send(mail: Welcome, job: Job) -> None:
        if job.attempts == 0:
            raise SmtpDown(f"busy, user {mail.user}")
        sent.append(mail.user)

    @app.schedule("nightly", "0 2 * * *")
    async def nightly(run: Job) -> None:
        sent.append(-1)

    return app, sent


async def test_the_declared_targets_run_on_the_tests_store_and_each_failure_is_reported(
    tmp_path: Path,
) -> None:
    app, sent = module_app(tmp_path)
    async with app.testing(clock=FakeClock(T0)) as t:
        async with app.transaction() as tx:
            await app.enqueue("mail:welcome", Welcome(7), tx=tx)
        first = await t.run_until_idle()
        assert [(r.job.target, r.result) for r in first.runs] == [("mail:welcome", "failed")]
        (failure,) = first.failures
        assert isinstance(failure.exception, SmtpDown) and str(failure.exception) == "busy, user 7"
        assert failure.error is not None and "busy, user 7" in failure.error
        with pytest.raises(SmtpDown, match="busy"):
            first.raise_failures()
        assert "mail:welcome" in str(first) and "busy, user 7" in str(first)

        t.clock.advance(minutes=1)
        second = await t.run_until_idle()
        assert (second.ok, second.failures, sent) == (1, [], [7])
        second.raise_failures()  # nothing failed: nothing raised

        t.clock.set(datetime(2026, 3, 3, 2, 0, tzinfo=UTC))  # the nightly slot
        assert (await t.run_until_idle()).ok == 1 and sent == [7, -1]
    assert not (tmp_path / "production.db").exists()  # the app's own store was never opened


async def test_the_apps_own_pod_is_back_after_the_block(tmp_path: Path) -> None:
    app, _ = module_app(tmp_path)
    own = app.pod
    async with app.testing() as t:
        assert app.pod is t.pod and app.pod is not own
        with pytest.raises(ConfigError, match="already open"):
            async with app.testing():
                pass
    assert app.pod is own
    async with app.testing(store=f"sqlite:///{tmp_path / 'again.db'}") as again:
        assert again.pod is not t.pod  # a fresh store and pod per block


async def test_run_until_idle_reports_counts_and_runs_without_testing(tmp_path: Path) -> None:
    """`app.run_until_idle()` outside `testing()` reports the runs too (the error line:
    the handlers are not watched there)."""
    app = App(store="memory://", clock=FakeClock(T0))

    @app.target("t", lane="fast")
    async def fail(job: Job) -> None:
        raise RuntimeError("nope")

    await app.start(workers=False)
    try:
        async with app.transaction() as tx:
            await app.enqueue("t", None, tx=tx)
        ran = await app.run_until_idle()
    finally:
        await app.stop()
    assert (ran.failed, ran.total) == (1, 1)
    assert ran.runs[0].exception is None and "nope" in (ran.runs[0].error or "")
    with pytest.raises(AssertionError, match="nope"):
        ran.raise_failures()
