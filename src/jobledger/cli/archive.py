"""`jobledger archive`: move closed jobs' events older than a cut-off to JSON Lines."""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any

from jobledger.cli._audit import parse_time, run_on_store
from jobledger.cli.progress import Progress
from jobledger.core.clock import SystemClock
from jobledger.domain.errors import InvalidArgument
from jobledger.projections.archive import LogArchive
from jobledger.storage.port import Store


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "archive",
        help="archive and remove the events of finished jobs older than a cut-off",
        description="Appends every event of job streams that left the queue before the"
        " cut-off to DIR/archive-<cutoff>.jsonl (fsynced), then removes them from the log."
        " Open jobs and schedules are never touched.",
    )
    when = parser.add_mutually_exclusive_group(required=True)
    when.add_argument("--before", type=parse_time, help="cut-off time (ISO 8601)")
    when.add_argument("--older-than-days", type=float, help="cut-off as an age in days")
    parser.add_argument("--dir", default="jobledger-archive", help="archive directory")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    if args.older_than_days is not None and args.older_than_days <= 0:
        raise InvalidArgument("--older-than-days must be positive")
    cutoff = args.before or SystemClock().now() - timedelta(days=args.older_than_days)

    async def work(store: Store) -> int:
        archive = LogArchive(store, args.dir, retention_days=None)
        with Progress("archive", unit="finished jobs") as progress:
            result = await archive.archive_before(cutoff, on_round=progress.advance)
        print(
            f"archived {result.events} events of {result.streams} finished jobs"
            + (f" to {result.file}" if result.file else "")
        )
        return 0

    return run_on_store(args, work)
