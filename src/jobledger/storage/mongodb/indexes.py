"""The MongoDB adapter's indexes, versioned like the SQL stores' migrations.

`open()` creates indexes only through `MIGRATIONS`: the database remembers the last
version applied (`migrations._id = "indexes"`), a pod applies only the versions after
it, and a changed definition is a new version that drops the old index and creates one
under a new name. So no pod ever re-issues an old definition against a changed index
(which the server refuses with IndexOptionsConflict), and a pod still running an older
release, finding a newer version recorded, creates nothing.

Every query that relies on a partial index repeats the index's filter expression
literally (`builders.py`), so the planner can prove the index covers it (see
docs/mongodb.md "Checking index use").

A migration may also seed the log's high-water mark from the positions already in the
log (version 3): a database that the first release wrote holds positioned events but
no `sequencer` document, and a step numbering from 0 would give their positions again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from jobledger.domain.jobs import Lane
from jobledger.storage.mongodb import builders as b
from jobledger.storage.mongodb.builders import PENDING, RUNNING, Doc, by_id
from jobledger.storage.mongodb.codec import Database

INDEX_NOT_FOUND = 27
NAMESPACE_EXISTS = 48
OPTIONS_CONFLICT = frozenset({85, 86})  # IndexOptionsConflict, IndexKeySpecsConflict


@dataclass(frozen=True, slots=True)
class IndexSpec:
    collection: str
    keys: list[tuple[str, int]]
    options: Doc

    @property
    def name(self) -> str:
        return str(self.options["name"])


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    create: Sequence[IndexSpec] = ()
    drop: Sequence[tuple[str, str]] = field(default=())  # (collection, index name)
    seed_high_water: bool = False  # raise the mark to the log's highest position


def _spec(collection: str, keys: list[tuple[str, int]], name: str, **options: Any) -> IndexSpec:
    return IndexSpec(collection, keys, {"name": name, **options})


_STRING = {"$type": "string"}

MIGRATIONS: tuple[Migration, ...] = (
    # 1: the indexes of the first release (log positions from a counter document)
    Migration(
        1,
        create=(
            _spec("events", [("stream", 1), ("version", 1)], "stream_version", unique=True),
            _spec(
                "events",
                [("dedupe_key", 1)],
                "dedupe_key",
                unique=True,
                partialFilterExpression={"dedupe_key": _STRING},
            ),
            _spec("events", [("at", 1)], "at"),
            _spec(
                "jobs",
                [("partition", 1), ("order_key", 1), ("version", 1), ("_id", 1)],
                "fast_pending",
                partialFilterExpression={"status": PENDING, "lane": Lane.FAST.value},
            ),
            _spec(
                "jobs",
                [("lane", 1), ("next_run_at", 1)],
                "pending_due",
                partialFilterExpression={"status": PENDING},
            ),
            _spec(
                "jobs",
                [("lease_until", 1)],
                "running_lease",
                partialFilterExpression={"status": RUNNING},
            ),
            _spec(
                "jobs",
                [("running_code", 1)],
                "running_code",
                unique=True,
                partialFilterExpression={"status": RUNNING, "running_code": _STRING},
            ),
            _spec(
                "jobs",
                [("partition", 1), ("inflight_token", 1)],
                "inflight",
                partialFilterExpression={"inflight_token": _STRING},
            ),
            _spec("jobs", [("status", 1), ("_id", -1)], "status_newest"),
            _spec("jobs", [("target", 1), ("_id", -1)], "target_newest"),
            _spec("jobs", [("code", 1), ("_id", -1)], "code_newest"),
            _spec("jobs", [("key", 1), ("_id", -1)], "key_newest"),
            _spec("workers", [("heartbeat_at", 1)], "heartbeat"),
            _spec(
                "schedules",
                [("next_run_at", 1)],
                "due",
                partialFilterExpression={"enabled": True},
            ),
        ),
    ),
    # 2: positions assigned after commit (decisions D15); a dedupe index the `$in`
    # lookup provably satisfies; the schedules `due` index no query used
    Migration(
        2,
        create=(
            _spec(
                "events",
                [("dedupe_key", 1)],
                "dedupe",
                unique=True,
                partialFilterExpression={"dedupe_key": {"$exists": True}},
            ),
            _spec(
                "events",
                [("position", 1)],
                "position",
                unique=True,
                partialFilterExpression={"position": {"$exists": True}},
            ),
            _spec(
                "events",
                [("stream", 1), ("version", 1)],
                b.PENDING_INDEX,
                partialFilterExpression={"pending": True},
            ),
        ),
        drop=(("events", "dedupe_key"), ("schedules", "due")),
    ),
    # 3: the mark starts at the highest position the first release gave (decisions D44)
    Migration(3, seed_high_water=True),
)
LATEST = MIGRATIONS[-1].version


def pending_migrations(applied: int) -> list[Migration]:
    """The migrations after version `applied`, in order (none for a newer database)."""
    return [m for m in MIGRATIONS if m.version > applied]


def current_indexes() -> dict[tuple[str, str], IndexSpec]:
    """Every index a database at `LATEST` holds, by (collection, name): the migrations
    folded."""
    live: dict[tuple[str, str], IndexSpec] = {}
    for migration in MIGRATIONS:
        for place in migration.drop:
            live.pop(place, None)
        for spec in migration.create:
            live[spec.collection, spec.name] = spec
    return live


def dead_ttl_spec(seconds: int) -> IndexSpec:
    """A TTL on DEAD rows' `closed_at` (`MongoStore(dead_ttl_seconds=...)`): off by
    default, since jobledger expires DEAD rows through JobExpired events."""
    return _spec(
        "jobs",
        [("closed_at", 1)],
        "dead_ttl",
        expireAfterSeconds=seconds,
        partialFilterExpression={"status": "DEAD"},
    )


MIGRATIONS_ID = "indexes"  # the `migrations` document recording the applied version


def applied_update(version: int) -> tuple[Doc, Doc]:
    """(filter, update) recording that `version` was applied (never lowering it)."""
    return by_id(MIGRATIONS_ID), {"$max": {"version": version}}


def ttl_change(seconds: int) -> Doc:
    """The `collMod` command that changes an existing TTL index's expiry."""
    return {"collMod": "jobs", "index": {"name": "dead_ttl", "expireAfterSeconds": seconds}}


COLLECTIONS = (
    "events",
    "jobs",
    "schedules",
    "partitions",
    "workers",
    "checkpoints",
    "counters",
    "sequencer",
    "migrations",
)


async def seed_high_water(db: Database) -> int:
    """Raise the mark to the highest position in the log (`$max`: never lowered, so a
    pod seeding while steps run changes nothing they wrote); returns that position."""
    flt, sort = b.highest_position_query()
    top = await db.events.find_one(flt, b.fields("position"), sort=sort, hint="position")
    highest = int(top["position"]) if top else 0
    await db.sequencer.update_one(*b.seed_high_water(highest), upsert=True)
    return highest


async def migrate(db: Database, dead_ttl_seconds: int | None = None) -> int:
    """Create the collections, apply the index migrations not yet applied, and set the
    DEAD-row TTL when configured; returns the version the database is at."""
    from pymongo.errors import CollectionInvalid, OperationFailure

    existing = set(await db.list_collection_names())
    for name in COLLECTIONS:
        if name not in existing:
            try:
                await db.create_collection(name)
            except CollectionInvalid:  # listed by the driver meanwhile
                pass
            except OperationFailure as exc:  # created concurrently by another pod
                if exc.code != NAMESPACE_EXISTS:
                    raise
    doc = await db.migrations.find_one(by_id(MIGRATIONS_ID))
    applied = int(doc["version"]) if doc else 0
    for migration in pending_migrations(applied):
        for collection, name in migration.drop:
            try:
                await db[collection].drop_index(name)
            except OperationFailure as exc:
                if exc.code != INDEX_NOT_FOUND:
                    raise
        for spec in migration.create:
            await db[spec.collection].create_index(spec.keys, **spec.options)
        if migration.seed_high_water:
            await seed_high_water(db)
        await db.migrations.update_one(*applied_update(migration.version), upsert=True)
        applied = max(applied, migration.version)
    if dead_ttl_seconds is not None:
        spec = dead_ttl_spec(dead_ttl_seconds)
        try:
            await db.jobs.create_index(spec.keys, **spec.options)
        except OperationFailure as exc:
            if exc.code not in OPTIONS_CONFLICT:
                raise
            await db.command(ttl_change(dead_ttl_seconds))
    return applied
