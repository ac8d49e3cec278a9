"""The MongoDB adapter's index migrations (storage/mongodb/indexes.py), without a server."""

from __future__ import annotations

from jobledger.storage.mongodb import builders as b
from jobledger.storage.mongodb import indexes as ix


def test_migrations_are_numbered_one_by_one() -> None:
    assert [m.version for m in ix.MIGRATIONS] == list(range(1, ix.LATEST + 1))
    assert ix.pending_migrations(0) == list(ix.MIGRATIONS)
    assert ix.pending_migrations(1) == list(ix.MIGRATIONS[1:])
    assert ix.pending_migrations(ix.LATEST) == []
    assert ix.pending_migrations(ix.LATEST + 5) == []  # a newer release migrated: create nothing


def test_a_changed_definition_is_a_new_name_never_a_redefinition() -> None:
    """Re-creating a name with other options is IndexOptionsConflict on the server: a
    migration may create a name only if no earlier one did, unless it was dropped."""
    live: dict[tuple[str, str], ix.IndexSpec] = {}
    for migration in ix.MIGRATIONS:
        for place in migration.drop:
            assert place in live, f"v{migration.version} drops {place}, which no version made"
            del live[place]
        for spec in migration.create:
            assert (spec.collection, spec.name) not in live
            live[spec.collection, spec.name] = spec
    assert live == ix.current_indexes()


def test_current_indexes_serve_the_log_the_queue_and_the_admin_list() -> None:
    idx = {name: spec for (_, name), spec in ix.current_indexes().items()}
    assert idx["stream_version"].keys == [("stream", 1), ("version", 1)]
    assert idx["stream_version"].options["unique"] is True
    # the dedupe lookup repeats this filter (builders.dedupe_query): provably covered
    assert idx["dedupe"].options == {
        "name": "dedupe",
        "unique": True,
        "partialFilterExpression": {"dedupe_key": {"$exists": True}},
    }
    assert b.dedupe_query(["k"])["dedupe_key"]["$exists"] is True
    assert "dedupe_key" not in idx and "due" not in idx
    assert idx["position"].options["unique"] is True
    assert idx["pending"].keys == [("stream", 1), ("version", 1)]
    assert idx["pending"].options["partialFilterExpression"] == b.pending_query()[0]
    fast = idx["fast_pending"]
    assert fast.collection == "jobs"
    assert fast.keys == [("partition", 1), ("order_key", 1), ("version", 1), ("_id", 1)]
    assert fast.options["partialFilterExpression"] == {"status": "PENDING", "lane": "fast"}
    assert idx["running_lease"].options["partialFilterExpression"] == {"status": "RUNNING"}
    assert idx["running_code"].options["partialFilterExpression"] == {
        "status": "RUNNING",
        "running_code": {"$type": "string"},
    }
    for name in ("status_newest", "target_newest", "code_newest", "key_newest"):
        assert idx[name].keys[-1] == ("_id", -1)
    assert "dead_ttl" not in idx


def test_partial_filters_are_repeated_by_the_queries_they_serve() -> None:
    idx = {name: spec for (_, name), spec in ix.current_indexes().items()}
    query, _ = b.fast_pending_query(3, None)
    assert idx["fast_pending"].options["partialFilterExpression"].items() <= query.items()
    running = b.running_codes_query(b.datetime(2026, 1, 1))
    assert idx["running_code"].options["partialFilterExpression"].items() <= running.items()
    inflight = b.inflight_query(3)
    assert idx["inflight"].options["partialFilterExpression"].items() <= inflight.items()


def test_dead_ttl_is_reachable_and_changed_in_place() -> None:
    spec = ix.dead_ttl_spec(86400 * 30)
    assert (spec.collection, spec.keys) == ("jobs", [("closed_at", 1)])
    assert spec.options["expireAfterSeconds"] == 2_592_000
    assert spec.options["partialFilterExpression"] == {"status": "DEAD"}
    assert ix.ttl_change(60) == {
        "collMod": "jobs",
        "index": {"name": "dead_ttl", "expireAfterSeconds": 60},
    }


def test_version_3_seeds_the_mark_from_the_log_after_the_position_index_exists() -> None:
    """A database of the first release holds positioned events and no `sequencer`
    document: a step numbering from 0 would give their positions again. Version 3 seeds
    the mark, once the `position` index it reads backwards exists (version 2)."""
    seeding = [m.version for m in ix.MIGRATIONS if m.seed_high_water]
    assert seeding == [3]
    made_before = {spec.name for m in ix.MIGRATIONS if m.version < seeding[0] for spec in m.create}
    assert "position" in made_before
    assert ix.MIGRATIONS[2].create == () and ix.MIGRATIONS[2].drop == ()
