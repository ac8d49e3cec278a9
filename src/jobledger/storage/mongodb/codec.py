"""How the adapter talks BSON, and with which read preference and concerns.

The store takes its database handle from the client (its own, or the application's
`client=`) with options of its own, whatever the client says (decisions D42):

* codec: dates come back timezone-aware in UTC (`tz_aware=True, tzinfo=UTC`), so an
  application's `AsyncMongoClient(tz_aware=False)` does not change what the engine reads;
* read preference primary: leases, the queue and `get_job` read what was last
  committed, never a secondary's stale copy (`secondaryPreferred` on the client);
* write concern majority: a lease take, a heartbeat or a checkpoint that a failover
  could roll back is never acknowledged (`w=1` on the client);
* read concern local: outside transactions the store reads the newest data on the
  primary, its own writes included (a lane must not read back a row it has just
  deleted); the log is read in snapshots (`MongoStore.read_log`, decisions D42) and
  transactions carry their own concerns (`transaction_options`).
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

from bson.codec_options import CodecOptions
from pymongo import AsyncMongoClient, ReadPreference, WriteConcern
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.read_concern import ReadConcern

Doc = dict[str, Any]
#: PyMongo's own types, so that mypy --strict checks every call the adapter makes
Client = AsyncMongoClient[Doc]
Database = AsyncDatabase[Doc]
Collection = AsyncCollection[Doc]
Session = AsyncClientSession

CODEC: CodecOptions[Doc] = CodecOptions(tz_aware=True, tzinfo=UTC)


PRIMARY = ReadPreference.PRIMARY
MAJORITY_WRITES = WriteConcern("majority")
LOCAL_READS = ReadConcern("local")
MAJORITY_READS = ReadConcern("majority")


def database(client: Client, name: str | None) -> Database:
    """The store's database on `client` with the adapter's own codec options, read
    preference and concerns (`name`, else the URL's default database, else
    `jobledger`)."""
    options: dict[str, Any] = {
        "codec_options": CODEC,
        "read_preference": PRIMARY,
        "write_concern": MAJORITY_WRITES,
        "read_concern": LOCAL_READS,
    }
    if name:
        return client.get_database(name, **options)
    return client.get_default_database("jobledger", **options)


def majority(collection: Collection) -> Collection:
    """`collection` read with majority read concern: what a failover cannot roll back."""
    return collection.with_options(read_concern=MAJORITY_READS)


def transaction_options() -> dict[str, Any]:
    """Engine-owned transactions: snapshot reads, majority commits, on the primary."""
    return {
        "read_concern": ReadConcern("snapshot"),
        "write_concern": MAJORITY_WRITES,
        "read_preference": PRIMARY,
    }
