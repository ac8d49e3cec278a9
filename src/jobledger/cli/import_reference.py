"""`jobledger import-reference`: move open rows of the reference engine into the log."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from jobledger.storage.urls import open_store, store_url


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "import-reference",
        help="import PENDING/RUNNING/DEAD rows of the reference engine's MongoDB jobs collection",
        description="Reads the reference engine's `jobs` collection and appends, per row, a"
        " JobEnqueued (and JobFailed or JobDead for its state) to this engine's store."
        " Rows whose dedupe key is already in the log are skipped, so a rerun is safe.",
    )
    parser.add_argument(
        "--from", dest="source", required=True, help="mongodb:// URL of the reference database"
    )
    parser.add_argument("--db", default=None, help="database name (default: the URL's)")
    parser.add_argument("--collection", default="jobs")
    parser.add_argument("--dry-run", action="store_true", help="convert and count, write nothing")
    parser.set_defaults(func=lambda args: asyncio.run(_run(args)))


async def _run(args: argparse.Namespace) -> int:
    from pymongo import AsyncMongoClient

    from jobledger.storage.mongodb.reference_import import changes_from_reference_job

    client: Any = AsyncMongoClient(args.source, tz_aware=True)
    source = client[args.db] if args.db else client.get_default_database()
    store = open_store(store_url(args.store))
    await store.open()
    counts = {"read": 0, "imported": 0, "already_there": 0, "partition_mismatch": 0}
    batch: list[Any] = []
    try:
        async for doc in source[args.collection].find({"lane": {"$exists": True}}).sort("_id", 1):
            counts["read"] += 1
            imported = changes_from_reference_job(doc, partitions=store.partitions)
            counts["partition_mismatch"] += imported.partition_mismatch
            batch.extend(imported.changes)
            if len(batch) >= 500:
                await _flush(store, batch, counts, args.dry_run)
        await _flush(store, batch, counts, args.dry_run)
    finally:
        await store.close()
        await client.close()
    print(" ".join(f"{name}={value}" for name, value in counts.items()))
    return 0


async def _flush(store: Any, batch: list[Any], counts: dict[str, int], dry_run: bool) -> None:
    if batch and not dry_run:
        flags = await store.apply(batch)
        counts["imported"] += sum(flags)
        counts["already_there"] += len(flags) - sum(flags)
    batch.clear()
