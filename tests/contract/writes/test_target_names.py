"""A target name no store can hold is refused where it is declared and where a job
names it, with one message on every store: U+0000 (PostgreSQL raised a raw
`psycopg.DataError` mid-transaction while SQLite stored it)."""

from __future__ import annotations

import pytest

from jobledger.app import App
from jobledger.domain.errors import InvalidArgument
from jobledger.domain.jobs import Job, Lane, NewJob
from jobledger.engine import Engine
from jobledger.storage.port import Store
from tests.contract.conftest import Kit
from tests.stores import all_jobs

NUL_TARGET = "mail:wel\x00come"
SAYS = (
    r"^target must not contain U\+0000 \(NUL\): PostgreSQL cannot store it, so no store takes it$"
)


async def _noop(job: Job) -> None:
    return None


def test_registration_refuses_a_nul_in_the_name(engine: Engine) -> None:
    with pytest.raises(InvalidArgument, match=SAYS):
        engine.targets.register(NUL_TARGET, Lane.FAST, _noop)
    with pytest.raises(InvalidArgument, match=SAYS):
        App(store="memory://").target(NUL_TARGET)(_noop)
    with pytest.raises(InvalidArgument, match=SAYS):
        App(store="memory://").declare_target(NUL_TARGET)
    assert NUL_TARGET not in engine.targets


async def test_enqueue_refuses_a_nul_target_before_anything_is_written(
    store: Store, engine: Engine, kit: Kit
) -> None:
    async with engine.transaction() as tx:
        with pytest.raises(InvalidArgument, match=SAYS):
            await engine.enqueue(NUL_TARGET, {"n": 1}, tx=tx)
        with pytest.raises(InvalidArgument, match=SAYS):
            await engine.enqueue_many([NewJob(NUL_TARGET, {"n": 2})], tx=tx)
        await kit.business_write(tx, "still mine")
    assert await all_jobs(store) == []
    assert await store.log.read_log(0, limit=10) == []
    assert await kit.business_count(store) == 1


async def test_the_other_texts_name_themselves_in_the_same_words(engine: Engine) -> None:
    for field, options in (
        ("key", {"key": "k\x00"}),
        ("dedupe_key", {"dedupe_key": "d\x00"}),
        ("code", {"code": "c\x00"}),
    ):
        async with engine.transaction() as tx:
            with pytest.raises(InvalidArgument, match=SAYS.replace("^target", f"^{field}")):
                await engine.enqueue("fast:t", {"n": 1}, tx=tx, **options)
