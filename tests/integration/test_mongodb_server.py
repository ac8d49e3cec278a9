"""The MongoDB adapter against a real replica set (docs/mongodb.md "Run the MongoDB suite").

Runs when JOBLEDGER_TEST_MONGO_URI names a replica set, or through testcontainers when
a Docker engine answers (tests/factories/mongodb.py); otherwise every test here is
skipped with the reason printed (`pytest -rs`). Each test works in a fresh database,
dropped afterwards.

* `explain()` of the hot reads: the dedupe lookup every enqueue makes, the fast lane's
  partition read, the long lane's candidate read, and the log's reads — the pending
  probe every `read_log` makes, a sequencing step's read, the page up to the mark, the
  newest-first page and the highest position — use an index (IXSCAN) and never scan the
  collection (COLLSCAN) — docs/mongodb.md "Check the index use".
* 20 concurrent business transactions submit one dedupe key through
  `run_in_transaction`: one job, all 20 business writes committed, every caller told
  that job; 20 concurrent `next_version` calls on one key get 1..20.
* A step held by a pod that died in it (a transaction left open on the head document):
  readers return at once with the published mark; once it is aborted, the next read
  positions what was committed meanwhile.
* `replay --apply`'s swap keeps every index and leaves no staging collection; a log
  written by the first release gets its mark seeded from its highest position.
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
from jobledger.storage.mongodb import indexes as ix
from jobledger.storage.mongodb.codec import transaction_options
from jobledger.storage.port import Transaction
from tests.builders import make_engine
from tests.contract.lanes_kit import Recorder, enqueue, keys_in, pod, until
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


async def test_the_logs_reads_use_their_indexes(mongo: MongoStore, clock: FakeClock) -> None:
    """Every `read_log` first asks whether an event is pending; the filter `pending:
    true` names no key of the `pending` index, so only the sort on its keys (and the
    hint) keep that probe off a collection scan of the whole log."""
    await _fill(mongo, clock)  # 340 JobEnqueued and 8 JobClaimed, all pending
    flt, projection, sort = b.pending_query()
    probe = mongo.db.events.find(flt, projection).sort(sort).hint(b.PENDING_INDEX).limit(1)
    assert_index_scan(await probe.explain(), uses={b.PENDING_INDEX})
    assert await mongo.sequencer.any_pending()
    assert len(await mongo.log.read_log(0, limit=100_000)) == 348  # positioned by the steps
    assert not await mongo.sequencer.any_pending()
    engine = make_engine(mongo, clock)
    engine.targets.register(FAST, "fast", Recorder())
    await enqueue(engine, FAST, [{"payload": n, "key": f"late-{n}"} for n in range(3)])
    # without the hint too: with 3 entries against the log's 351, the planner picks it
    unhinted = mongo.db.events.find(flt, projection).sort(sort).limit(1000)
    assert_index_scan(await unhinted.explain(), uses={b.PENDING_INDEX})
    step_read = mongo.db.events.find(flt, projection).sort(sort).hint(b.PENDING_INDEX)
    assert_index_scan(await step_read.limit(1000).explain(), uses={b.PENDING_INDEX})
    query, order = b.read_log_query(10, 200)
    assert_index_scan(
        await mongo.db.events.find(query).sort(order).limit(100).explain(), uses={"position"}
    )
    query, order = b.log_newest_query(None)
    assert_index_scan(
        await mongo.db.events.find(query).sort(order).limit(100).explain(), uses={"position"}
    )
    flt, order = b.highest_position_query()
    assert_index_scan(
        await mongo.db.events.find(flt).sort(order).hint("position").limit(1).explain(),
        uses={"position"},
    )
    assert await ix.seed_high_water(mongo.db) == 348  # the 3 late ones are still pending


# --- business transactions that meet: run_in_transaction runs them again --------------


async def test_20_transactions_submitting_one_dedupe_key_make_one_job_and_lose_nothing(
    mongo: MongoStore, clock: FakeClock
) -> None:
    """A double click, a webhook retry: 20 concurrent business transactions write their
    own row and enqueue one dedupe key. The losers are aborted by the server (a write
    conflict on the key) and run again by `run_in_transaction`; then they find the
    winner's job. One job, 20 business rows, every caller told the same job."""
    engine = make_engine(mongo, clock)
    engine.targets.register(FAST, "fast", Recorder())
    attempts: list[int] = []

    async def submit(n: int) -> tuple[str | None, bool]:
        async def place(tx: Transaction) -> tuple[str | None, bool]:
            attempts.append(n)
            await business_write(tx, n)
            done = await engine.enqueue(
                FAST, {"order": 7}, key="order-7", dedupe_key="order-placed:7", tx=tx
            )
            await asyncio.sleep(0.02)  # held open while the others write the key
            return done.job_id, done.inserted

        return await mongo.run_in_transaction(place)

    results = await asyncio.gather(*(submit(n) for n in range(20)))
    assert await business_count(mongo) == 20  # no business transaction lost
    job_ids = {job_id for job_id, _ in results}
    assert len(job_ids) == 1 and [inserted for _, inserted in results].count(True) == 1
    assert [j.id for j in await all_jobs(mongo)] == list(job_ids)
    assert len(attempts) > 20  # some were aborted and run again
    enqueued = [
        e for e in await mongo.log.read_log(0, limit=1000) if e.type == EventType.JOB_ENQUEUED
    ]
    assert len(enqueued) == 1


async def test_20_concurrent_next_version_calls_on_one_key_count_1_to_20(
    mongo: MongoStore, clock: FakeClock
) -> None:
    engine = make_engine(mongo, clock)

    async def ask(n: int) -> int:
        async def count(tx: Transaction) -> int:
            await business_write(tx, n)
            version = await engine.next_version("order-7", tx=tx)
            await asyncio.sleep(0.01)
            return version

        return await mongo.run_in_transaction(count)

    versions = await asyncio.gather(*(ask(n) for n in range(20)))
    assert sorted(versions) == list(range(1, 21))
    assert await business_count(mongo) == 20


# --- a step held by a dead pod ---------------------------------------------------------


async def test_readers_do_not_wait_for_a_step_a_dead_pod_holds(
    mongo: MongoStore, clock: FakeClock
) -> None:
    """A transaction left open with the head document written — a pod killed in the
    middle of its step, until the server aborts it — makes every other step give way:
    `read_log` returns at once with the published mark, and after the abort the next
    read positions what was committed meanwhile."""
    engine = make_engine(mongo, clock)
    engine.targets.register(FAST, "fast", Recorder())
    await enqueue(engine, FAST, [{"payload": 1, "key": "a"}])
    assert len(await mongo.log.read_log(0, limit=100)) == 1
    async with mongo.client.start_session() as dead:
        await dead.start_transaction(**transaction_options())
        query, update = b.step_start()
        await mongo.db.sequencer.update_one(query, update, session=dead)
        await enqueue(engine, FAST, [{"payload": 2, "key": "b"}])
        started = asyncio.get_running_loop().time()
        seen = await asyncio.wait_for(mongo.log.read_log(0, limit=100), timeout=5)
        assert asyncio.get_running_loop().time() - started < 5
        assert [e.position for e in seen] == [1]  # the published mark, nothing more
        assert mongo.sequencer.gave_way >= 1
        await dead.abort_transaction()  # what the server does after its lifetime limit
    after = await mongo.log.read_log(0, limit=100)
    assert [e.position for e in after] == [1, 2]


# --- replay --apply's swap, the first release's log -----------------------------------


async def _indexes(mongo: MongoStore, collection: str) -> list[dict[str, Any]]:
    listed = [dict(i) async for i in await mongo.db[collection].list_indexes()]
    return sorted(({k: v for k, v in i.items() if k != "ns"} for i in listed), key=str)


async def test_the_read_model_swap_keeps_the_indexes_and_the_rows(
    mongo: MongoStore, clock: FakeClock
) -> None:
    await _fill(mongo, clock)
    jobs, schedules = await all_jobs(mongo), await mongo.admin.list_schedules()
    before = await _indexes(mongo, "jobs")
    await mongo.db.jobs.delete_many({"lane": "long"})  # a read model gone wrong
    await mongo.projections.replace_read_models(jobs, schedules)
    assert await all_jobs(mongo) == jobs
    assert await _indexes(mongo, "jobs") == before
    names = await mongo.db.list_collection_names()
    assert not [n for n in names if n.endswith("__rebuild")]


async def test_a_first_release_log_gets_its_mark_from_its_highest_position(
    mongo: MongoStore, clock: FakeClock
) -> None:
    """The first release numbered events in the transaction and kept no `sequencer`
    document: version 3 of the index migrations seeds the mark, so the next step does
    not give those positions again."""
    engine = make_engine(mongo, clock)
    engine.targets.register(FAST, "fast", Recorder())
    await enqueue(engine, FAST, [{"payload": n, "key": f"k{n}"} for n in range(5)])
    assert len(await mongo.log.read_log(0, limit=100)) == 5
    # as the first release left it: positions, no head document, index version 1
    await mongo.db.sequencer.delete_many({})
    await mongo.db.migrations.update_one(b.by_id(ix.MIGRATIONS_ID), {"$set": {"version": 1}})
    await mongo.migrate()
    head = await mongo.db.sequencer.find_one(b.by_id(b.HEAD_ID))
    assert head is not None and head["high_water"] == 5
    await enqueue(engine, FAST, [{"payload": 9, "key": "k9"}])
    assert [e.position for e in await mongo.log.read_log(0, limit=100)] == [1, 2, 3, 4, 5, 6]


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
