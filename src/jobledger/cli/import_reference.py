"""`jobledger import-reference`: move open rows of the reference engine into the log.

Each row is converted on its own (`reference_import.convert_row`): a row that cannot be
imported is reported on standard error as `row <_id>: <reason>` and counted, and the
rest are imported. On a terminal a progress bar shows the rows read (nothing when
piped). The summary line goes to standard output; the exit status is 1 when a row
was refused, else 0.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jobledger.cli._audit import configured_store, mongo_error_line, reach
from jobledger.cli.progress import Progress
from jobledger.domain.errors import ConfigError
from jobledger.domain.jobs import Change
from jobledger.storage.port import Store

BATCH = 500
#: the reference's rows (rows without `lane` are old-shape rows it never read)
ROW_FILTER = {"lane": {"$exists": True}}
#: how long the reference database may take to answer before the command gives up
REACH_TIMEOUT_MS = 5000


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "import-reference",
        help="import PENDING/RUNNING/DEAD rows of the reference engine's MongoDB jobs collection",
        description="Reads the reference engine's `jobs` collection and appends, per row, a"
        " JobEnqueued (and JobFailed or JobDead for its state) to this engine's store."
        " Rows whose dedupe key is already in the log are skipped, so a rerun is safe."
        " A row that cannot be imported is reported (row id and reason) and the rest go on;"
        " the exit status is then 1.",
    )
    parser.add_argument(
        "--from", dest="source", required=True, help="mongodb:// URL of the reference database"
    )
    parser.add_argument("--db", default=None, help="database name (default: the URL's)")
    parser.add_argument("--collection", default="jobs")
    parser.add_argument("--dry-run", action="store_true", help="convert and count, write nothing")
    parser.set_defaults(func=lambda args: asyncio.run(_run(args)))


@dataclass
class Counts:
    read: int = 0
    imported: int = 0
    already_there: int = 0
    partition_mismatch: int = 0
    errors: int = 0
    error_lines: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"read={self.read} imported={self.imported} already_there={self.already_there}"
            f" partition_mismatch={self.partition_mismatch} errors={self.errors}"
        )


async def import_rows(
    rows: AsyncIterable[Mapping[str, Any]],
    store: Store,
    progress: Progress,
    *,
    dry_run: bool = False,
    max_payload_bytes: int | None = None,
) -> Counts:
    """Convert and append `rows` in batches; report each refused row through
    `progress.echo` (above the bar on a terminal, a plain line when piped)."""
    from jobledger.storage.mongodb.reference_import import (
        DEFAULT_MAX_PAYLOAD_BYTES,
        RowError,
        convert_row,
    )

    limit = max_payload_bytes or DEFAULT_MAX_PAYLOAD_BYTES
    counts = Counts()
    batch: list[Change] = []
    async for doc in rows:
        counts.read += 1
        result = convert_row(doc, partitions=store.partitions, max_payload_bytes=limit)
        if isinstance(result, RowError):
            counts.errors += 1
            counts.error_lines.append(result.line())
            progress.echo(result.line())
        else:
            counts.partition_mismatch += result.partition_mismatch
            batch.extend(result.changes)
        if len(batch) >= BATCH:
            await _flush(store, batch, counts, dry_run)
        progress.advance()
    await _flush(store, batch, counts, dry_run)
    return counts


async def _flush(store: Store, batch: list[Change], counts: Counts, dry_run: bool) -> None:
    if batch and not dry_run:
        flags = await store.writes.apply(batch)
        counts.imported += sum(flags)
        counts.already_there += len(flags) - sum(flags)
    batch.clear()


async def _run(args: argparse.Namespace) -> int:
    try:
        from pymongo import AsyncMongoClient
        from pymongo.errors import ConfigurationError, PyMongoError
    except ModuleNotFoundError as exc:
        raise ConfigError(
            "import-reference reads MongoDB: install it with: pip install 'jobledger[mongo]'"
        ) from exc

    from jobledger.storage.mongodb.reference_import import SOURCE_CODEC

    store = configured_store(args)
    await reach(store)
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        args.source, serverSelectionTimeoutMS=REACH_TIMEOUT_MS
    )
    try:
        source = (
            client.get_database(args.db, codec_options=SOURCE_CODEC)
            if args.db
            else client.get_default_database(codec_options=SOURCE_CODEC)
        )
        await client.admin.command("ping")
    except ConfigurationError as exc:  # before any I/O: the URL names no database
        await client.close()
        raise ConfigError(
            "the --from URL names no database: add it (mongodb://host/tms) or pass --db"
        ) from exc
    except PyMongoError as exc:
        await client.close()
        raise ConfigError(
            f"cannot reach the reference MongoDB (--from): {mongo_error_line(exc)}"
        ) from exc
    collection = source[args.collection]
    await store.open()
    try:
        with Progress("import-reference", unit="rows") as progress:
            if progress.enabled:  # counting is a scan: only when someone watches
                progress.update(0, total=await collection.count_documents(ROW_FILTER))
            rows = collection.find(ROW_FILTER).sort("_id", 1)
            counts = await import_rows(rows, store, progress, dry_run=args.dry_run)
    finally:
        await store.close()
        await client.close()
    print(counts.summary())
    return 1 if counts.errors else 0
