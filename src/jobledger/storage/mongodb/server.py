"""What server the adapter needs: a replica set (or sharded cluster) running 6.0 or later.

Transactions and change streams exist only on replica sets; 6.0 is the oldest release
still supported by MongoDB that the adapter's claims are argued against (snapshot
transactions and snapshot reads, `$exists` partial filters, change-stream
`updateDescription`). `open()` asks the server and fails with one line instead of at
the first transaction.

On a sharded cluster the log's collections, `events` and `sequencer`, must not be
sharded (decisions D42): the log's unique indexes (dedupe key, position, stream and
version) cannot be enforced across shards, and one mark numbers one log. `open()` reads
`config.collections` through mongos and refuses a sharded one; readers take the mark
and the events in one snapshot, so an unsharded log is read consistently wherever its
two collections live.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from jobledger.storage.mongodb.codec import Client

logger = logging.getLogger("jobledger.storage.mongodb")

MINIMUM_VERSION = (6, 0)
LOG_COLLECTIONS = ("events", "sequencer")
UNAUTHORIZED = 13


def server_problem(hello: dict[str, Any], build_info: dict[str, Any]) -> str | None:
    """Why this server cannot hold the store, or None: from the `hello` and `buildInfo`
    command replies."""
    version = tuple(int(part) for part in list(build_info.get("versionArray", []))[:2])
    if version < MINIMUM_VERSION:
        found = build_info.get("version", "unknown")
        return (
            f"MongoDB {found} is too old: jobledger needs MongoDB "
            f"{MINIMUM_VERSION[0]}.{MINIMUM_VERSION[1]} or later"
        )
    if hello.get("msg") == "isdbgrid":
        return None  # mongos: the shards are replica sets
    if not hello.get("setName"):
        return (
            "MongoDB is a standalone server: jobledger needs a replica set (transactions and "
            "change streams); a single node will do: mongod --replSet rs0, then rs.initiate()"
        )
    return None


def sharded_problem(database: str, tracked: Iterable[Mapping[str, Any]]) -> str | None:
    """Why the log of `database` cannot live on this sharded cluster, or None: from the
    `config.collections` documents of its collections (a collection that is only
    tracked, `unsplittable: true` — MongoDB 8.0 lists unsharded ones too — is not
    sharded)."""
    names = {f"{database}.{name}": name for name in LOG_COLLECTIONS}
    for doc in tracked:
        name = names.get(str(doc.get("_id")))
        if name is None or doc.get("unsplittable") or doc.get("dropped"):
            continue
        return (
            f"MongoDB collection {database}.{name} is sharded: jobledger needs its log "
            "collections (events, sequencer) unsharded (the log's unique indexes and its one "
            "high-water mark); unshard it (unshardCollection) or use another database"
        )
    return None


async def _tracked(client: Client, database: str) -> list[dict[str, Any]]:
    """The `config.collections` documents of the log's collections (none readable: [])."""
    from pymongo.errors import OperationFailure

    names = [f"{database}.{name}" for name in LOG_COLLECTIONS]
    try:
        cursor = client.get_database("config").collections.find({"_id": {"$in": names}})
        return [dict(doc) async for doc in cursor]
    except OperationFailure as exc:
        if exc.code != UNAUTHORIZED:
            raise
        logger.warning(
            "cannot read config.collections (%s): not checking that %s.events and "
            "%s.sequencer are unsharded",
            exc,
            database,
            database,
        )
        return []


async def check_server(client: Client, database: str) -> None:
    """Raise `ConfigError` with `server_problem`'s line when the server cannot serve,
    or `sharded_problem`'s when `database`'s log is sharded."""
    from jobledger.domain.errors import ConfigError

    admin = client.admin
    hello = await admin.command("hello")
    problem = server_problem(hello, await admin.command("buildInfo"))
    if problem is None and hello.get("msg") == "isdbgrid":
        problem = sharded_problem(database, await _tracked(client, database))
    if problem is not None:
        raise ConfigError(problem)
