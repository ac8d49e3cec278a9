"""Replace a read-model collection by building a new one and renaming it over the old.

`MongoStore.replace_read_models` (what `jobledger replay --apply` runs) used to delete
and reinsert the whole queue in one transaction; a queue of a few hundred thousand rows
outlives a transaction's 60 s limit or its share of the cache, and the swap failed.
Now each collection is built beside the live one, outside any transaction (batches of
`BATCH` rows, majority write concern), given the live collection's indexes (read with
`listIndexes`, so a `dead_ttl` index or any later one comes along), and renamed over
the live one with `renameCollection ... dropTarget: true`, which replaces it in one
step (decisions D43). Readers see the old rows until the rename and the new ones after
it; `jobs` and `schedules` are swapped one after the other, which is why replay asks
for the workers to be stopped.

`readWrite` on the database is enough: it grants `renameCollectionSameDB`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from itertools import islice
from typing import Any

from jobledger.storage.mongodb.codec import Database, Doc

BATCH = 1000
STAGING_SUFFIX = "__rebuild"
NOT_COPIED = frozenset({"v", "key", "ns", "background"})  # index fields the server sets


def staging_name(collection: str) -> str:
    """The collection a rebuild of `collection` is written to before the swap."""
    return collection + STAGING_SUFFIX


def batches(docs: Iterable[Doc], size: int = BATCH) -> Iterator[list[Doc]]:
    """`docs` in lists of at most `size` (none for no documents)."""
    it = iter(docs)
    while chunk := list(islice(it, size)):
        yield chunk


def index_copies(listed: Iterable[Mapping[str, Any]]) -> list[tuple[list[tuple[str, Any]], Doc]]:
    """(keys, options) for `create_index` that make the indexes `listIndexes` returned
    for a collection again on another one, `_id` left out (every collection has it)."""
    copies: list[tuple[list[tuple[str, Any]], Doc]] = []
    for index in listed:
        if index.get("name") == "_id_":
            continue
        keys = [(str(field), direction) for field, direction in dict(index["key"]).items()]
        options = {k: v for k, v in index.items() if k not in NOT_COPIED}
        copies.append((keys, options))
    return copies


async def build(db: Database, collection: str, docs: Iterable[Doc]) -> int:
    """Write `docs`, with `collection`'s indexes, to its staging collection (a staging
    collection left by an interrupted rebuild is dropped first). Returns how many."""
    staging = db[staging_name(collection)]
    await staging.drop()
    await db.create_collection(staging.name)
    written = 0
    for chunk in batches(docs):
        await staging.insert_many(chunk, ordered=True)
        written += len(chunk)
    listed = [dict(index) async for index in await db[collection].list_indexes()]
    for keys, options in index_copies(listed):
        await staging.create_index(keys, **options)
    return written


async def swap(db: Database, collections: Iterable[str]) -> None:
    """Rename each built staging collection over its live one, back to back."""
    for collection in collections:
        await db[staging_name(collection)].rename(collection, dropTarget=True)
