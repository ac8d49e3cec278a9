"""How the adapter talks BSON, and with which read and write concerns.

Dates come back timezone-aware in UTC (`tz_aware=True, tzinfo=UTC`) whatever the
client's own options are: the store takes its database from the caller's client with
these codec options, so an application's `AsyncMongoClient(tz_aware=False)` does not
change what the engine reads.
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


def database(client: Client, name: str | None) -> Database:
    """The store's database on `client` with the adapter's codec options (`name`, else
    the URL's default database, else `jobledger`)."""
    if name:
        return client.get_database(name, codec_options=CODEC)
    return client.get_default_database("jobledger", codec_options=CODEC)


def majority(collection: Collection) -> Collection:
    """`collection` read with majority read concern: what a failover cannot roll back."""
    return collection.with_options(read_concern=ReadConcern("majority"))


def transaction_options() -> dict[str, Any]:
    """Engine-owned transactions: snapshot reads, majority commits, on the primary."""
    return {
        "read_concern": ReadConcern("snapshot"),
        "write_concern": WriteConcern("majority"),
        "read_preference": ReadPreference.PRIMARY,
    }
