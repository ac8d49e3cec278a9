"""The `--setup` hook of the operator views' browser test: the admin page test's
targets and schedules, plus a target whose partner is down (it gets paused)."""

from __future__ import annotations

from typing import Any

from jobledger import TargetUnreachable
from jobledger.domain.jobs import Job
from tests.e2e import app_setup

DOWN = "e2e:down"


async def unreachable(job: Job) -> None:
    raise TargetUnreachable("partner host is down")


def register_targets(engine: Any) -> None:
    app_setup.register_targets(engine)
    engine.targets.register(DOWN, "fast", unreachable)


def setup(app: Any) -> None:
    app_setup.setup(app)
    app.engine.targets.register(DOWN, "fast", unreachable)
