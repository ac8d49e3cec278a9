"""The event log: streams, commit-ordered positions, dedupe keys, checkpoints."""

from __future__ import annotations

import asyncio

from jobledger.core.clock import FakeClock
from jobledger.domain.chain import verify_chain
from jobledger.engine import Engine
from jobledger.storage.port import Store
from tests.contract.conftest import Kit
from tests.contract.helpers import FAST, LONG, claim, dispatch, enqueue, new_job, renew, succeed
from tests.stores import all_jobs


async def test_read_stream_returns_a_streams_events_in_version_order(
    store: Store, engine: Engine, clock: FakeClock
) -> None:
    job = await enqueue(engine, LONG, {"n": 1}, dedupe_key="d")
    other = await enqueue(engine, FAST, dedupe_key="other")
    assert await store.writes.apply([claim(job, clock)]) == [True]
    running = await store.admin.get_job(job.id)
    assert running is not None
    assert await store.writes.apply([renew(running, clock)]) == [True]
    events = await store.log.read_stream(job.stream)
    assert [(e.version, e.type) for e in events] == [
        (1, "JobEnqueued"),
        (2, "JobClaimed"),
        (3, "JobLeaseRenewed"),
    ]
    assert verify_chain(events) == []  # stored and read back, the hashes still hold
    assert events[0].data["payload"] == {"n": 1}
    assert all(e.stream == job.stream for e in events)
    assert [e.stream for e in await store.log.read_stream(other.stream)] == [other.stream]
    assert await store.log.read_stream("job:missing") == []


async def test_read_log_pages_in_position_order(
    store: Store, engine: Engine, clock: FakeClock
) -> None:
    made = [await enqueue(engine, FAST, dedupe_key=f"d{i}") for i in range(5)]
    assert await store.writes.apply([dispatch(made[0], clock), succeed(made[1], clock)]) == [
        True,
        True,
    ]
    everything = await store.log.read_log(0, limit=100)
    assert len(everything) == 7
    positions = [e.position or 0 for e in everything]
    assert all(p > 0 for p in positions)
    assert positions == sorted(positions) and len(set(positions)) == 7
    assert verify_chain(everything) == []

    paged, after = [], 0
    while page := await store.log.read_log(after, limit=3):
        assert len(page) <= 3
        paged.extend(page)
        last = page[-1].position
        assert last is not None
        after = last
    assert paged == everything
    assert [e.position or 0 for e in paged] == positions
    assert await store.log.read_log(after, limit=10) == []


async def test_a_reader_never_skips_a_late_commit(
    store: Store, engine: Engine, kit: Kit, clock: FakeClock
) -> None:
    """Two writers: A opens first and commits last. A reader that keeps the last position
    it saw, and reads while A is still open, still gets A's events afterwards."""
    async with kit.peer(store) as peer:
        late = new_job(clock, dedupe_key="late")
        early = new_job(clock, dedupe_key="early")
        seen = []
        async with store.writes.transaction() as tx:
            assert await store.writes.append_in(tx, [late]) == [True]
            writer_b = asyncio.create_task(peer.writes.apply([early]))
            for _ in range(5):
                await asyncio.sleep(0)
            seen = await store.log.read_log(0, limit=100)
            assert late.stream not in {e.stream for e in seen}  # not committed yet
        assert await writer_b == [True]
        after = max((e.position or 0 for e in seen), default=0)
        rest = await store.log.read_log(after, limit=100)
        streams = [e.stream for e in seen + rest]
        assert sorted(streams) == sorted([late.stream, early.stream])
        every = await store.log.read_log(0, limit=100)
        assert [e.position for e in every] == sorted(e.position or 0 for e in every)
        assert {e.stream for e in every} == {late.stream, early.stream}


async def test_a_dedupe_key_in_the_log_is_seen_on_either_lane(store: Store, engine: Engine) -> None:
    await enqueue(engine, FAST, dedupe_key="a")
    await enqueue(engine, LONG, dedupe_key="b")
    async with engine.transaction() as tx:
        results = [
            await engine.enqueue(target, dedupe_key=key, tx=tx)
            for target, key in ((LONG, "a"), (FAST, "b"), (FAST, "c"), (LONG, "a"))
        ]
    assert [r.inserted for r in results] == [False, False, True, False]
    assert sorted(j.dedupe_key or "" for j in await all_jobs(store)) == ["a", "b", "c"]


async def test_checkpoints_start_empty_and_keep_the_last_save(store: Store) -> None:
    assert await store.projections.load_checkpoint("stats") == (0, None)
    await store.projections.save_checkpoint(
        "stats", 12, {"by_target": {"fast:t": 3}, "seen": [1, 2]}
    )
    await store.projections.save_checkpoint("other", 3, None)
    await store.projections.save_checkpoint("stats", 40, {"by_target": {"fast:t": 9}, "seen": []})
    assert await store.projections.load_checkpoint("stats") == (
        40,
        {"by_target": {"fast:t": 9}, "seen": []},
    )
    assert await store.projections.load_checkpoint("other") == (3, None)


async def test_a_loaded_checkpoint_is_a_copy(store: Store) -> None:
    await store.projections.save_checkpoint("stats", 1, {"n": [1]})
    _, state = await store.projections.load_checkpoint("stats")
    state["n"].append(2)
    assert await store.projections.load_checkpoint("stats") == (1, {"n": [1]})
