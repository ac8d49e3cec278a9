"""The MongoDB store's own options and plumbing, checked without a server: the database
handle's read preference and concerns, the sharded-cluster check, the read-model
swap's pieces, the DEAD-row TTL from the URL or the settings, the adapter's metrics and
the write path's round trips (on a recording fake: no server runs here)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from bson.codec_options import CodecOptions
from pymongo import AsyncMongoClient, ReadPreference, WriteConcern
from pymongo.read_concern import ReadConcern

from jobledger.config.load import load_settings
from jobledger.domain import job_commands, jobs
from jobledger.domain.errors import ConfigError, InvalidArgument
from jobledger.domain.jobs import Lane, NewJob
from jobledger.domain.policies import partition_of
from jobledger.engine import Engine
from jobledger.observability.logs import install_observers
from jobledger.storage.mongodb import MongoStore, rebuild, server
from jobledger.storage.mongodb import builders as b
from jobledger.storage.mongodb import indexes as ix
from jobledger.storage.mongodb.codec import Doc
from jobledger.storage.mongodb.url_options import dead_ttl, split_dead_ttl
from jobledger.storage.mongodb.writes import write_changes
from jobledger.storage.urls import open_store
from tests.net import free_port
from tests.unit.test_mongodb_builders import STAMP


def _url(options: str = "") -> str:
    return f"mongodb://127.0.0.1:{free_port()}/?serverSelectionTimeoutMS=50{options}"


# --- the database handle is the store's own ------------------------------------------


async def test_the_store_reads_the_primary_and_writes_majority_whatever_the_client_says() -> None:
    """An application client reading from secondaries with w=1 and read concern
    "available": leases, the queue and get_job must not read a stale secondary, and a
    lease take must not be acknowledged before a majority has it."""
    client: AsyncMongoClient[Doc] = AsyncMongoClient(
        _url("&readPreference=secondaryPreferred&w=1&readConcernLevel=available"),
        tz_aware=False,
    )
    try:
        assert client.read_preference == ReadPreference.SECONDARY_PREFERRED
        store = MongoStore(client=client, database="app")
        for handle in (store.db, store.db.jobs, store.db.partitions, store.db.events):
            assert handle.read_preference == ReadPreference.PRIMARY
            assert handle.write_concern == WriteConcern("majority")
            assert handle.read_concern == ReadConcern("local")
        codec: CodecOptions[Any] = store.db.codec_options
        assert codec.tz_aware is True
        # the change stream and its resume token: majority-committed
        assert store.watcher.db.read_concern == ReadConcern("majority")
        assert store.watcher.db.read_preference == ReadPreference.PRIMARY
    finally:
        await client.close()


# --- sharded clusters ------------------------------------------------------------------


def test_a_sharded_log_collection_is_refused_by_name() -> None:
    sharded = [{"_id": "app.events", "key": {"_id": "hashed"}, "unique": False}]
    problem = server.sharded_problem("app", sharded)
    assert problem is not None and "app.events is sharded" in problem
    sequencer = [{"_id": "app.sequencer", "key": {"_id": 1}}]
    assert "app.sequencer is sharded" in str(server.sharded_problem("app", sequencer))


def test_unsharded_tracked_or_other_collections_pass() -> None:
    tracked = [
        {"_id": "app.events", "unsplittable": True},  # 8.0 tracks unsharded ones too
        {"_id": "app.jobs", "key": {"_id": "hashed"}},  # not the log
        {"_id": "other.events", "key": {"_id": 1}},  # another database
        {"_id": "app.sequencer", "dropped": True},
    ]
    assert server.sharded_problem("app", tracked) is None
    assert server.sharded_problem("app", []) is None


def test_mongos_is_accepted_by_the_version_check_and_sent_to_the_shard_check() -> None:
    build = {"version": "7.0.2", "versionArray": [7, 0, 2, 0]}
    assert server.server_problem({"msg": "isdbgrid"}, build) is None
    assert "standalone" in str(server.server_problem({}, build))
    assert "too old" in str(server.server_problem({"setName": "rs0"}, {"versionArray": [5, 0]}))


# --- the read-model swap -----------------------------------------------------------------


def _listed(specs: list[ix.IndexSpec]) -> list[dict[str, Any]]:
    """What `listIndexes` returns for a collection holding `specs` (plus `_id`)."""
    listed: list[dict[str, Any]] = [{"v": 2, "key": {"_id": 1}, "name": "_id_"}]
    for spec in specs:
        listed.append({"v": 2, "key": dict(spec.keys), **spec.options})
    return listed


def test_the_swap_copies_every_index_of_the_live_collection() -> None:
    """The rebuilt `jobs` gets the queue's indexes, the DEAD-row TTL included, exactly
    as listed; `_id` comes with every collection."""
    live = [spec for (coll, _), spec in ix.current_indexes().items() if coll == "jobs"]
    live.append(ix.dead_ttl_spec(3600))
    copies = rebuild.index_copies(_listed(live))
    assert copies == [(spec.keys, spec.options) for spec in live]
    assert all("v" not in options and "key" not in options for _, options in copies)


def test_the_swap_writes_in_batches_to_a_staging_collection() -> None:
    docs = [{"_id": n} for n in range(2_500)]
    chunks = list(rebuild.batches(docs))
    assert [len(c) for c in chunks] == [1000, 1000, 500]
    assert [d for c in chunks for d in c] == docs
    assert list(rebuild.batches([])) == []
    assert rebuild.staging_name("jobs") == "jobs__rebuild"
    assert rebuild.staging_name("jobs") not in ix.COLLECTIONS


# --- the DEAD-row TTL from the URL or the settings ------------------------------------


def test_dead_ttl_seconds_is_taken_out_of_the_url_for_the_driver() -> None:
    url = "mongodb://a:1,b:2/app?replicaSet=rs0&dead_ttl_seconds=86400&appName=x%3Ay"
    assert split_dead_ttl(url) == ("mongodb://a:1,b:2/app?replicaSet=rs0&appName=x%3Ay", 86400)
    assert split_dead_ttl("mongodb://h/?replicaSet=rs0;dead_ttl_seconds=60") == (
        "mongodb://h/?replicaSet=rs0",
        60,
    )
    assert split_dead_ttl("mongodb+srv://h/app") == ("mongodb+srv://h/app", None)
    for bad in ("0", "-5", "soon", ""):
        with pytest.raises(ConfigError, match="dead_ttl_seconds"):
            split_dead_ttl(f"mongodb://h/?dead_ttl_seconds={bad}")
    with pytest.raises(ConfigError, match="twice"):
        split_dead_ttl("mongodb://h/?dead_ttl_seconds=1&dead_ttl_seconds=2")


def test_the_url_and_the_setting_may_name_one_ttl() -> None:
    assert dead_ttl(60, None) == 60 and dead_ttl(None, 60) == 60 and dead_ttl(None, None) is None
    assert dead_ttl(60, 60) == 60
    with pytest.raises(ConfigError, match="mongodb_dead_ttl_seconds setting 70"):
        dead_ttl(60, 70)


@pytest.fixture
async def stores() -> AsyncIterator[list[MongoStore]]:
    made: list[MongoStore] = []
    yield made
    for store in made:
        await store.client.close()


async def test_a_store_url_and_the_settings_reach_the_store(stores: list[MongoStore]) -> None:
    """`store_url` (config file, JOBLEDGER_STORE) carries `dead_ttl_seconds=`; the
    setting `mongodb_dead_ttl_seconds` gives it when the URL does not. The driver never
    sees the option (PyMongo would warn about it, an error under this suite)."""
    from_url = open_store(_url("&dead_ttl_seconds=600"))
    assert isinstance(from_url, MongoStore)
    stores.append(from_url)
    assert from_url.dead_ttl_seconds == 600
    settings = load_settings(env={"JOBLEDGER_MONGODB_DEAD_TTL_SECONDS": "900"})
    assert settings.mongodb_dead_ttl_seconds == 900
    from_setting = open_store(_url(), mongodb_dead_ttl_seconds=settings.mongodb_dead_ttl_seconds)
    assert isinstance(from_setting, MongoStore)
    stores.append(from_setting)
    assert from_setting.dead_ttl_seconds == 900
    assert load_settings(env={}).mongodb_dead_ttl_seconds is None
    with pytest.raises(ConfigError):
        load_settings(env={"JOBLEDGER_MONGODB_DEAD_TTL_SECONDS": "0"})


# --- the adapter's counters reach the engine's metrics ---------------------------------


async def test_the_watchers_failures_and_the_steps_that_gave_way_are_metrics(
    stores: list[MongoStore],
) -> None:
    from jobledger.observability.metrics import render

    store = MongoStore(_url(), database="t")
    stores.append(store)
    telemetry = install_observers(Engine(store))
    assert telemetry.metrics is not None
    store.watcher.failures, store.watcher.consecutive_failures = 7, 3
    store.sequencer.gave_way = 2
    text = render(telemetry.metrics.registry).decode()
    assert "jobledger_mongodb_change_stream_failures_total 7.0" in text
    assert "jobledger_mongodb_change_stream_consecutive_failures 3.0" in text
    assert "jobledger_mongodb_change_streams_opened_total 0.0" in text
    assert "jobledger_mongodb_sequencing_gave_way_total 2.0" in text
    store.watcher.consecutive_failures = 0  # read at each scrape
    assert "consecutive_failures 0.0" in render(telemetry.metrics.registry).decode()


# --- the write path's round trips --------------------------------------------------------


class Result:
    matched_count = 1
    deleted_count = 1


class Cursor:
    def __aiter__(self) -> Cursor:
        return self

    async def __anext__(self) -> Doc:
        raise StopAsyncIteration


class Collection:
    """Records each call a transaction's writes make; finds nothing, matches every CAS."""

    def __init__(self, name: str, calls: list[tuple[str, str, Any]]) -> None:
        self.name, self.calls = name, calls

    def find(self, *args: Any, session: Any = None) -> Cursor:
        self.calls.append((self.name, "find", args[0]))
        return Cursor()

    async def find_one(self, *args: Any, session: Any = None) -> Doc | None:
        self.calls.append((self.name, "find_one", args[0]))
        return None

    async def insert_many(self, docs: list[Doc], *, ordered: bool, session: Any) -> None:
        assert ordered and session == "tx"
        self.calls.append((self.name, "insert_many", [d["_id"] for d in docs]))

    async def insert_one(self, doc: Doc, *, session: Any) -> None:
        self.calls.append((self.name, "insert_one", doc["_id"]))

    async def update_one(self, query: Doc, update: Doc, *, session: Any) -> Result:
        assert session == "tx"
        self.calls.append((self.name, "update_one", query["_id"]))
        return Result()

    async def delete_one(self, query: Doc, *, session: Any) -> Result:
        self.calls.append((self.name, "delete_one", query["_id"]))
        return Result()


class Db:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    def __getitem__(self, name: str) -> Collection:
        return Collection(name, self.calls)

    def __getattr__(self, name: str) -> Collection:
        return Collection(name, self.calls)


def _enqueued(n: int) -> jobs.Change:
    key = f"order-{n}"
    return job_commands.enqueued(
        job_id=f"{n:032d}",
        spec=NewJob("kafka:t", {"n": n}, key=key),
        code="code",
        lane=Lane.FAST,
        partition=partition_of(key, None),
        dedupe_key=None,
        stamp=STAMP,
        traceparent=None,
    )


async def test_an_enqueue_of_many_jobs_inserts_their_rows_in_one_round_trip() -> None:
    db = Db()
    changes = [_enqueued(n) for n in range(50)]
    assert await write_changes(cast(Any, db), cast(Any, "tx"), changes, None) == [True] * 50
    writes = [(coll, op) for coll, op, _ in db.calls if op != "find"]
    assert writes == [("jobs", "insert_many"), ("events", "insert_many")]
    (rows,) = [ids for coll, op, ids in db.calls if (coll, op) == ("jobs", "insert_many")]
    assert rows == [c.row.id for c in changes if c.row is not None]


async def test_new_rows_are_written_before_a_later_change_reads_or_updates_rows() -> None:
    """The writes keep the order of the changes: a run of new rows goes in before a
    compare-and-set that follows it in the same call."""
    db = Db()
    first, second, third = _enqueued(1), _enqueued(2), _enqueued(3)
    assert first.row is not None and second.row is not None and third.row is not None
    dispatched = job_commands.dispatch(first.row, token="t", pod="p", stamp=STAMP)
    changes = [first, second, dispatched, third]
    assert await write_changes(cast(Any, db), cast(Any, "tx"), changes, None) == [True] * 4
    writes = [(coll, op, ids) for coll, op, ids in db.calls if op != "find"]
    assert writes == [
        ("jobs", "insert_many", [first.row.id, second.row.id]),
        ("jobs", "update_one", first.row.id),
        ("jobs", "insert_many", [third.row.id]),
        (
            "events",
            "insert_many",
            [b.event_id(e.stream, e.version) for c in changes for e in c.events],
        ),
    ]


# --- the caller's session: one transaction rule ----------------------------------------


async def test_a_session_outside_a_transaction_is_refused_before_any_write() -> None:
    """As a psycopg connection in autocommit is on PostgreSQL: the job would commit on its
    own. No server runs here, so a write that went out would fail on server selection
    instead of the refusal."""
    client: AsyncMongoClient[Doc] = AsyncMongoClient(_url(), connect=False)
    store = MongoStore(client=client, database="app")
    engine = Engine(store)
    engine.targets.register("t", "long", lambda job: None)
    session = client.start_session()
    other = sqlite3.connect(":memory:")
    try:
        with pytest.raises(InvalidArgument, match="start_transaction") as refused:
            await engine.enqueue("t", {"n": 1}, tx=session)
        assert "\n" not in str(refused.value)
        with pytest.raises(InvalidArgument, match="inside a transaction"):
            await engine.next_version("k", tx=session)
        with pytest.raises(TypeError, match="sqlite3 connection enqueues into a SQLite store"):
            await engine.enqueue("t", None, tx=other)
    finally:
        other.close()
        await session.end_session()
        await client.close()
