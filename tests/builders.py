"""Objects many tests build the same way: an engine on a store, a job's first change,
a job row. Nothing here knows an adapter; the stores come from tests.factories."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from jobledger.config.settings import Settings
from jobledger.core.clock import FakeClock
from jobledger.core.ids import new_id
from jobledger.domain import job_commands
from jobledger.domain.jobs import Change, Job, Lane, NewJob, Stamp
from jobledger.domain.policies import partition_of
from jobledger.engine import Engine
from jobledger.storage.port import Store

#: the time `a_job` stamps its row with
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)

_PAYLOAD: Any = object()  # `new_job`'s default: a fresh {"n": 1} per job


def make_engine(store: Store, clock: FakeClock, **overrides: Any) -> Engine:
    """An engine on `store` with default settings for its partition count, `overrides`
    (any `Settings` field) applied."""
    settings = dataclasses.replace(Settings(partitions=store.partitions), **overrides)
    return Engine(store, clock=clock, settings=settings)


def new_job(
    clock: FakeClock,
    *,
    target: str = "fast:t",
    lane: Lane = Lane.FAST,
    key: str | None = None,
    dedupe_key: str | None = None,
    partitions: int = 64,
    job_id: str | None = None,
    code: str | None = None,
    payload: Any = _PAYLOAD,
) -> Change:
    """A JobEnqueued change built by the domain, for feeding `apply` or `append_in`
    directly: a fresh id (from the clock) unless `job_id`, the dedupe key that id unless
    `dedupe_key`, the code the target unless `code`, the payload `{"n": 1}` unless
    `payload`."""
    ident = job_id or new_id(int(clock.now().timestamp() * 1000))
    dedupe = dedupe_key or ident
    return job_commands.enqueued(
        job_id=ident,
        spec=NewJob(target, {"n": 1} if payload is _PAYLOAD else payload, code, key, 0, dedupe_key),
        code=code or target,
        lane=lane,
        partition=partition_of(key, dedupe, partitions),
        dedupe_key=dedupe,
        stamp=Stamp(clock.now()),
    )


def a_job(
    target: str = "kafka:orders", lane: Lane = Lane.FAST, *, trace_id: str | None = None
) -> Job:
    """A PENDING row as the domain makes it: job `1…1` of code `order_update` on `target`,
    key `o-1`, partition 1, dedupe key `order_update:o-1:1`, enqueued at `T0`."""
    change = job_commands.enqueued(
        job_id="1" * 32, spec=NewJob(target, key="o-1"), code="order_update", lane=lane,
        partition=1, dedupe_key="order_update:o-1:1", stamp=Stamp(T0, None, trace_id),
    )  # fmt: skip
    row: Job = change.row
    return row
