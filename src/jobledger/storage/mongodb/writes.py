"""Applying `Change`s inside one transaction (the caller's or the engine's).

A transaction writes only documents that are its own or that a concurrent writer of
the same thing must conflict with: its new events (no position: decisions D15), the
job and schedule rows it changes (compare-and-set on `stream_version`), and — for a
guarded fast-lane write — a fence on the partition lease documents it relies on.
Nothing every transaction writes exists, so business transactions that enqueue do not
conflict with each other or with lane commits (only with a writer of the same stream
or the same dedupe key, which must lose).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pymongo import ReturnDocument

from jobledger.domain.jobs import Change
from jobledger.storage.mongodb import builders as b
from jobledger.storage.mongodb.codec import Database, Doc, Session
from jobledger.storage.port import LeaseGuard


async def write_changes(
    db: Database, session: Session, changes: Sequence[Change], guard: LeaseGuard | None
) -> list[bool]:
    """Apply `changes` in `session`'s transaction; a losing change is dropped alone.

    Every change that would lose is filtered *before* writing, so no write raises a
    duplicate-key error (which would abort a caller's transaction). New rows go in with
    one ordered `insert_many` per run of new changes (an enqueue of n jobs: one round
    trip, not n); the run is written before any change that reads or updates rows, so
    the writes keep the order of `changes`.
    """
    seen = await _existing(db, session, "dedupe_key", b.dedupe_query, _new_keys(changes))
    existing = await _existing(
        db, session, "stream", b.stream_exists_query, [c.stream for c in changes if c.is_new]
    )
    held = None
    if guard is not None:
        held = await fence_leases(db, session, guard, [c.partition for c in changes])
    flags: list[bool] = []
    winners: list[Change] = []
    inserts: list[tuple[str, Doc]] = []  # (collection, row) of new changes not yet written
    for change in changes:
        if inserts and not _only_inserts(change):
            await _insert_rows(db, session, inserts)
        ok = await _write_row(db, session, change, seen, existing, held, inserts)
        if ok and change.is_new and change.dedupe_key:
            seen.add(change.dedupe_key)
        flags.append(ok)
        if ok:
            winners.append(change)
    await _insert_rows(db, session, inserts)
    events = [b.event_doc(e) for c in winners for e in c.events]
    if events:
        await db.events.insert_many(events, ordered=True, session=session)
    return flags


async def dedupe_holders(db: Database, session: Session, keys: Sequence[str]) -> dict[str, str]:
    """The job id holding each of `keys` in the log, read in `session`'s transaction."""
    if not keys:
        return {}
    cursor = db.events.find(b.dedupe_query(keys), b.fields("dedupe_key", "stream"), session=session)
    return {d["dedupe_key"]: str(d["stream"]).removeprefix("job:") async for d in cursor}


async def next_version(db: Database, session: Session, key: str) -> int:
    """`Store.next_version`: the key's document in `counters` counted up in `session`'s
    transaction (upserted at 1). A second transaction writing the same document before
    this one ends is aborted at once by a write conflict (a TransientTransactionError),
    which `run_in_transaction` or `with_transaction` retries until this one has ended;
    so a key's numbers follow commit order."""
    found = await db.counters.find_one_and_update(
        {"_id": key},
        {"$inc": {"value": 1}},
        upsert=True,
        return_document=ReturnDocument.AFTER,
        projection={"value": True},
        session=session,
    )
    assert found is not None  # an upsert returning the document after it always has one
    return int(found["value"])


def _only_inserts(change: Change) -> bool:
    """Whether writing `change` only inserts (a new row that needs no conflict check)."""
    return change.is_new and b.running_code_conflict_query(change) is None


async def _insert_rows(db: Database, session: Session, inserts: list[tuple[str, Doc]]) -> None:
    """Write the pending new rows, one ordered `insert_many` per collection run; empties
    `inserts`."""
    start = 0
    while start < len(inserts):
        collection = inserts[start][0]
        end = start
        while end < len(inserts) and inserts[end][0] == collection:
            end += 1
        docs = [doc for _, doc in inserts[start:end]]
        await db[collection].insert_many(docs, ordered=True, session=session)
        start = end
    inserts.clear()


def _new_keys(changes: Sequence[Change]) -> list[str]:
    return [c.dedupe_key for c in changes if c.is_new and c.dedupe_key]


async def _existing(
    db: Database,
    session: Session,
    field: str,
    query: Callable[[Sequence[str]], Doc],
    values: Sequence[str],
) -> set[str]:
    if not values:
        return set()
    cursor = db.events.find(query(values), b.fields(field), session=session)
    return {d[field] async for d in cursor}


async def fence_leases(
    db: Database, session: Session, guard: LeaseGuard, partitions: Sequence[int | None]
) -> set[int]:
    """The partitions whose lease `guard.pod` holds at `guard.now`, each *written*
    (`$inc` of its fence) inside the transaction: a takeover of one of them that
    commits after this transaction's snapshot conflicts with it (the transaction is
    retried and then finds the lease gone), and one that comes later waits for this
    commit — the role `FOR SHARE` plays on PostgreSQL."""
    held: set[int] = set()
    for partition in sorted({p for p in partitions if p is not None}):
        query, update = b.lease_fence(guard.pod, guard.now, partition)
        result = await db.partitions.update_one(query, update, session=session)
        if result.matched_count:
            held.add(partition)
    return held


async def _write_row(
    db: Database,
    session: Session,
    change: Change,
    seen: set[str],
    existing: set[str],
    held: set[int] | None,
    inserts: list[tuple[str, Doc]],
) -> bool:
    if held is not None and change.partition is not None and change.partition not in held:
        return False
    if change.is_new and (
        change.stream in existing or (change.dedupe_key and change.dedupe_key in seen)
    ):
        return False
    conflict = b.running_code_conflict_query(change)
    if conflict is not None and await db.jobs.find_one(conflict, b.fields(), session=session):
        return False
    if change.is_new:
        if change.row is not None:
            inserts.append((b.collection_of(change), b.row_document(change)))
        return True
    collection = db[b.collection_of(change)]
    if change.row is None:
        deleted = await collection.delete_one(b.cas_query(change), session=session)
        return bool(deleted.deleted_count)
    updated = await collection.update_one(
        b.cas_query(change), b.row_update(change), session=session
    )
    return bool(updated.matched_count)
