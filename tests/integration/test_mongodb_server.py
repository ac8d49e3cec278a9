"""The MongoDB adapter against a real replica set (docs/mongodb.md "Run the MongoDB suite").

Runs when JOBLEDGER_TEST_MONGO_URI names a replica set, or through testcontainers when
a Docker engine answers (tests/factories/mongodb.py); otherwise every test here is
skipped with the reason printed (`pytest -rs`). Each test works in a fresh database,
dropped afterwards.

* `explain()` of the three hot reads: the dedupe lookup every enqueue makes, the fast
  lane's partition read and the long lane's candidate read use an index (IXSCAN) and
  never scan the collection (COLLSCAN) — docs/mongodb.md "Check the index use".
* A second pod's change stream wakes exactly the partition and lane of a job's insert
  and of its update (the update event looks the row up).
* 20 business transactions enqueue concurrently while a fast lane commits its marks and
  outcomes and readers position the log (decisions D15): none of them aborts.
* The `MongoStore(client=..., database=...)` example of docs/mongodb.md runs as written.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from jobledger.core.clock import FakeClock
from jobledger.domain import job_commands
from jobledger.domain.events import EventType
from jobledger.domain.jobs import DeliveryMode, JobStatus, Lane, Stamp
from jobledger.storage.feed import Wake
from jobledger.storage.mongodb import MongoStore
from jobledger.storage.mongodb import builders as b
from tests.contract.lanes_kit import Recorder, enqueue, keys_in, make_engine, pod, until
from tests.e2e.test_docs_examples import ROOT, Block, blocks_of, run_block
from tests.factories.mongodb import (
    SKIP_REASON,
    business_count,
    business_write,
    make_store,
    mongo_uri,
    open_peer,
)
from tests.stores import all_jobs

pytestmark = pytest.mark.mongo

P = 5  # the fast lane's partition in these tests
FAST, LONG = "kafka:orders", "work:report"


@pytest.fixture
async def mongo(tmp_path: Path) -> AsyncIterator[MongoStore]:
    """An opened MongoStore on a fresh database (skips when no replica set is reachable)."""
    async with make_store(tmp_path) as store:
        assert isinstance(store, MongoStore)
        yield store


# --- explain(): the hot reads use their indexes ---------------------------------------


def plan_stages(explained: dict[str, Any]) -> tuple[list[str], set[str]]:
    """(every stage, every index name) of the winning plan, whatever the explain
    format: the classic tree (`inputStage`/`inputStages`), the slot-based engine's
    `queryPlan`, or a sharded cluster's `shards` list."""
    stages: list[str] = []
    indexes: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("stage"), str):
                stages.append(node["stage"])
            if isinstance(node.get("indexName"), str):
                indexes.add(node["indexName"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(explained["queryPlanner"]["winningPlan"])
    return stages, indexes


def assert_index_scan(explained: dict[str, Any], *, uses: set[str]) -> None:
    stages, indexes = plan_stages(explained)
    assert "IXSCAN" in stages, stages
    assert "COLLSCAN" not in stages, stages
    assert indexes and indexes <= uses, (indexes, uses)


async def _fill(store: MongoStore, clock: FakeClock) -> None:
    """A queue worth planning over: fast rows in many partitions, long rows PENDING and
    RUNNING, some with dedupe keys."""
    engine = make_engine(store, clock)
    engine.targets.register(FAST, "fast", Recorder())
    engine.targets.register(LONG, "long", Recorder())
    await enqueue(
        engine,
        FAST,
        [{"payload": n, "key": f"order-{n}", "dedupe_key": f"placed:{n}"} for n in range(300)],
    )
    await enqueue(engine, LONG, [{"payload": n, "dedupe_key": f"report:{n}"} for n in range(40)])
    stamp = Stamp(clock.now(), None, None)
    long_rows = [j for j in await all_jobs(store) if j.lane == Lane.LONG][:8]
    claims = [
        job_commands.claim(
            j, token=f"c{n}", pod="pod-x", lease=timedelta(minutes=5), exclusive=False, stamp=stamp
        )
        for n, j in enumerate(long_rows)
    ]
    assert all(await store.writes.apply(claims))


async def test_the_dedupe_lookup_uses_the_dedupe_index(mongo: MongoStore, clock: FakeClock) -> None:
    await _fill(mongo, clock)
    keys = ["placed:7", "placed:250", "absent"]
    cursor = mongo.db.events.find(b.dedupe_query(keys), b.fields("dedupe_key", "stream"))
    assert {d["dedupe_key"] async for d in cursor} == {"placed:7", "placed:250"}
    explained = await mongo.db.events.find(b.dedupe_query(keys), b.fields("dedupe_key")).explain()
    assert_index_scan(explained, uses={"dedupe"})


async def test_the_fast_lane_read_uses_fast_pending(mongo: MongoStore, clock: FakeClock) -> None:
    await _fill(mongo, clock)
    for after in (None, "order-1"):
        query, sort = b.fast_pending_query(P, after)
        explained = await mongo.db.jobs.find(query).sort(sort).limit(100).explain()
        assert_index_scan(explained, uses={"fast_pending"})
        assert "SORT" not in plan_stages(explained)[0]  # the index gives the order


async def test_the_long_lane_read_uses_indexes(mongo: MongoStore, clock: FakeClock) -> None:
    await _fill(mongo, clock)
    query, sort = b.long_candidates_query(clock.now() + timedelta(minutes=10))
    found = await mongo.queue.long_candidates(clock.now() + timedelta(minutes=10), limit=100)
    assert {j.status for j in found} == {JobStatus.PENDING, JobStatus.RUNNING}
    explained = await mongo.db.jobs.find(query).sort(sort).limit(100).explain()
    # each $or branch on its partial index (or on status_newest, which the planner may
    # prefer for a branch on a small collection): never a collection scan
    assert_index_scan(explained, uses={"pending_due", "running_lease", "status_newest"})


# --- the change stream names the partition and lane of an update --------------------


async def test_a_peer_is_woken_for_the_partition_and_lane_of_an_update(
    mongo: MongoStore, clock: FakeClock
) -> None:
    """Another pod's store hears a job's insert and its update through its own change
    stream, each as a wake-up of that job's partition and lane only (an update's
    updatedFields cannot name them: the stream looks the row up)."""
    async with open_peer(mongo) as peer:
        wakes: list[Wake] = []

        async def collect() -> None:
            async for wake in peer.feed():
                wakes.append(wake)

        task = asyncio.create_task(collect())
        try:
            await until(lambda: peer.watcher.streams_opened >= 1)  # and collect() subscribed
            wakes.clear()  # the EVERYTHING a newly opened stream publishes, if it was heard
            engine = make_engine(mongo, clock)
            engine.targets.register(FAST, "fast", Recorder())
            (job_id,) = await enqueue(engine, FAST, [{"payload": 1, "key": keys_in(P, 1)[0]}])
            await until(lambda: bool(wakes))
            assert wakes == [Wake(frozenset({P}), frozenset({Lane.FAST}), False)]  # the insert
            wakes.clear()
            job = await mongo.admin.get_job(job_id)
            assert job is not None
            stamp = Stamp(clock.now(), None, None)
            dispatch = job_commands.dispatch(job, token="t", pod="pod-x", stamp=stamp)
            assert await mongo.writes.apply([dispatch]) == [True]
            await until(lambda: bool(wakes))
            assert wakes == [Wake(frozenset({P}), frozenset({Lane.FAST}), False)]  # the update
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


# --- business transactions do not conflict with the lanes (decisions D15) -------------


async def test_20_business_transactions_enqueue_while_a_lane_commits(
    mongo: MongoStore, clock: FakeClock
) -> None:
    """Each business transaction is one attempt (`store.writes.transaction()`: no retry that
    would hide an abort), writes its own row and enqueues into the partition the lane
    is draining, and stays open while the lane commits and readers position the log."""
    engine = make_engine(mongo, clock)
    recorder = Recorder()
    engine.targets.register(FAST, "fast", recorder, delivery_mode=DeliveryMode.AT_MOST_ONCE)
    runtime = pod(engine, "pod-a")
    await runtime.leases.start()
    assert "business" in await mongo.db.list_collection_names()  # made by the factory
    keys = keys_in(P, 420)
    backlog, business_keys = keys[:400], keys[400:]
    await enqueue(engine, FAST, [{"payload": k, "key": k} for k in backlog])
    assert await mongo.log.read_log(0, limit=10_000)  # positioned: the lane works on a clean log
    go, business_done = asyncio.Event(), asyncio.Event()
    lane_rounds = 0
    aborted: list[tuple[int, BaseException]] = []
    overlaps: list[int] = []  # lane rounds committed while each business tx was open

    async def lane() -> None:  # at-most-once: a committed mark, then a committed outcome
        nonlocal lane_rounds
        go.set()
        while not business_done.is_set():
            if await runtime.fast.step(P) is None:
                break
            lane_rounds += 1

    async def log_reader() -> None:  # sequencing steps, as a projection makes them
        await go.wait()
        while not business_done.is_set():
            await mongo.log.read_log(0, limit=10_000)
            await asyncio.sleep(0.01)

    async def business(n: int) -> None:
        await go.wait()
        await asyncio.sleep(0.01 * n)
        try:
            async with mongo.writes.transaction() as tx:
                opened_at = lane_rounds
                await business_write(tx, n)
                await engine.enqueue(
                    FAST, {"order": n}, key=business_keys[n], dedupe_key=f"order:{n}", tx=tx
                )
                await asyncio.sleep(0.05)  # held open across lane commits
                overlaps.append(lane_rounds - opened_at)
        except Exception as exc:  # a WriteConflict / TransientTransactionError included
            aborted.append((n, exc))

    async def all_business() -> None:
        try:
            await asyncio.gather(*(business(n) for n in range(20)))
        finally:
            business_done.set()

    await asyncio.gather(lane(), log_reader(), all_business())
    assert aborted == []
    assert len(overlaps) == 20 and sum(overlaps) > 0  # the lane committed meanwhile
    assert await business_count(mongo) == 20
    events = await mongo.log.read_log(0, limit=100_000)
    assert [e.position for e in events] == list(range(1, len(events) + 1))  # no gap, no skip
    enqueued = {e.data.get("dedupe_key") for e in events if e.type == EventType.JOB_ENQUEUED}
    assert {f"order:{n}" for n in range(20)} <= enqueued


# --- the docs example ------------------------------------------------------------------


def _client_example() -> Block:
    found = [
        block
        for block in blocks_of(ROOT / "docs" / "mongodb.md")
        if "MongoStore(client=" in block.code and block.language == "python"
    ]
    assert len(found) == 1, "docs/mongodb.md should hold one MongoStore(client=...) example"
    return found[0]


def test_the_docs_example_is_skipped_by_the_docs_test_and_says_where_it_runs() -> None:
    block = _client_example()
    assert block.mode == "skip" and "test_mongodb_server.py" in block.argument


@pytest.fixture
def database_name() -> Iterator[str]:
    uri = mongo_uri()
    if uri is None:
        pytest.skip(SKIP_REASON)
    name = f"jobledger_docs_{uuid.uuid4().hex[:12]}"
    yield name
    from pymongo import MongoClient

    with MongoClient(uri) as client:
        client.drop_database(name)


def test_the_client_example_of_the_docs_runs_twice(database_name: str, tmp_path: Path) -> None:
    """As tests/e2e/test_docs_examples.py runs a block: `python -` in a fresh folder,
    twice (the second run finds the order's job already enqueued and delivered)."""
    block = _client_example()
    outputs = []
    for _ in range(2):
        returncode, output = run_block(
            block, tmp_path, MONGODB_URI=str(mongo_uri()), MONGODB_DB=database_name
        )
        assert returncode == 0 and "Traceback" not in output, output
        outputs.append(output)
    assert "receipt for order 7" in outputs[0] and "new job" in outputs[0]
    assert "already enqueued" in outputs[1] and "receipt for order 7" not in outputs[1]
    assert all("order 7 committed" in output for output in outputs)
