"""`jobledger verify`: check every stream's hash chain.

Exit status 0 when every chain holds; 1 when an event was edited, removed or
reordered, with one line per problem naming the stream, version and position.
"""

from __future__ import annotations

import argparse
from typing import Any

from jobledger.cli._audit import positive, run_on_store
from jobledger.cli.progress import Progress
from jobledger.projections.audit import verify_log
from jobledger.projections.log import DEFAULT_PAGE
from jobledger.storage.port import Store


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "verify", help="check the hash chain of every stream in the log", description=__doc__
    )
    parser.add_argument("--page", type=positive, default=DEFAULT_PAGE, help="events read per page")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    async def work(store: Store) -> int:
        with Progress("verify", unit="events") as progress:
            report = await verify_log(store, page=args.page, on_page=progress.advance)
        for line in report.lines():
            print(line)
        return 0 if report.ok else 1

    return run_on_store(args, work, existing=True)
