"""The single-enqueue statement (`Statements.enqueue_one`): the row it writes, part
sent and part read from the inserted event, is the change's row field by field; a
change whose row is not what its JobEnqueued makes is written as given by the general
statement."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from jobledger.core.clock import FakeClock
from jobledger.domain import job_commands
from jobledger.domain.chain import verify_chain
from jobledger.domain.events import Actor
from jobledger.domain.jobs import Change, Lane, NewJob, Stamp
from jobledger.storage.postgres import PostgresStore, encode
from tests.stores import all_jobs

pytestmark = pytest.mark.postgres


def opening(
    clock: FakeClock, n: int, lane: Lane = Lane.FAST, dedupe: str = "", **spec: object
) -> Change:
    return job_commands.enqueued(
        job_id=f"{n:032x}",
        spec=NewJob("kafka:t", **spec),  # type: ignore[arg-type]
        code=f"code-{n % 3}",
        lane=lane,
        partition=n % 4,
        dedupe_key=dedupe or f"d-{n}",
        stamp=Stamp(clock.now(), Actor(id="u", via="api") if n % 2 else None, f"{n:032x}"),
        traceparent=f"00-{n:032x}-{n:016x}-01" if n % 3 else None,
    )


async def test_each_single_enqueue_writes_the_change_row_field_by_field(
    pg: PostgresStore, clock: FakeClock
) -> None:
    changes = [
        opening(clock, 1, payload={"n": 1}, key="k", version=7, headers={"h": "ü"}),
        opening(clock, 2, Lane.LONG, payload=None, run_at=clock.now() + timedelta(seconds=9)),
        opening(clock, 3, payload=[1.5, -0.0, "tab\there", None]),
        opening(clock, 4, payload="text", key="k", version=-2),
    ]
    assert all(encode.opens_one(c) for c in changes)
    async with pg.writes.transaction() as tx:
        for change in changes:
            assert await pg.writes.append_in(tx, [change]) == [True]
    assert {j.id: j for j in await all_jobs(pg)} == {c.row.id: c.row for c in changes}
    keys = await pg.connections.tuples(f"SELECT id, order_key, attempts FROM {pg.s}.jobs")
    assert {k: (o, a) for k, o, a in keys} == {
        c.row.id: (c.row.order_key.encode(), 0) for c in changes
    }
    log = await pg.log.read_log(0, limit=10)
    assert log == [c.events[0] for c in changes] and verify_chain(log) == []


async def test_a_row_its_event_does_not_make_is_written_as_given(
    pg: PostgresStore, clock: FakeClock
) -> None:
    plain = opening(clock, 5, payload={"n": 5})
    odd = dataclasses.replace(plain, row=dataclasses.replace(plain.row, attempts=3))
    assert encode.opens_job(odd) and not encode.opens_one(odd)
    async with pg.writes.transaction() as tx:
        assert await pg.writes.append_in(tx, [odd]) == [True]
    assert await pg.admin.get_job(plain.row.id) == odd.row
    # the key it holds is seen by the single-enqueue statement: that job writes nothing
    again = opening(clock, 6, dedupe="d-5", payload={"n": 6})
    assert encode.opens_one(again)
    assert await pg.writes.apply([again]) == [False]
    assert await pg.admin.get_job(again.row.id) is None
