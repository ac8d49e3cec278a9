"""The `--setup` hook the browser test hands to `jobledger serve`: its targets and
schedules (the test seeds jobs for them into the same SQLite file first)."""

from __future__ import annotations

from typing import Any

from jobledger.domain.jobs import Job

FLAKY, OK, LATER = "e2e:flaky", "e2e:ok", "e2e:later"


async def fail(job: Job) -> None:
    raise RuntimeError("partner refused the request")


async def succeed(job: Job) -> None:
    return None


async def slot(run: Any) -> None:
    return None


def register_targets(engine: Any) -> None:
    engine.targets.register(FLAKY, "fast", fail)
    engine.targets.set_max_attempts(FLAKY, 1)  # DEAD on its first failure
    engine.targets.register(OK, "fast", succeed)
    engine.targets.register(LATER, "long", succeed, delivery_mode="at_least_once")


def setup(app: Any) -> None:
    register_targets(app.engine)
    app.scheduler.declare("e2e_hourly", "0 * * * *", slot)
    app.scheduler.declare("e2e_nightly", "30 2 * * *", slot)
