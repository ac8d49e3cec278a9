"""`jobledger replay [--apply]`: rebuild the read models from the log and compare.

Exit status 0 when the read models match the log, 1 when they differ (after `--apply`:
when they still differ, or the log has events the folds reject).
"""

from __future__ import annotations

import argparse
from typing import Any

from jobledger.cli._audit import positive, run_on_store
from jobledger.cli.progress import Progress
from jobledger.projections.log import DEFAULT_PAGE
from jobledger.projections.replay import replay
from jobledger.storage.port import Store


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "replay",
        help="rebuild the jobs and schedules read models from the log and report differences",
        description=__doc__,
    )
    parser.add_argument(
        "--apply",
        action="store_true",
        help="replace the live read models with the rebuilt ones (stop the workers first)",
    )
    parser.add_argument("--page", type=positive, default=DEFAULT_PAGE, help="events read per page")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    async def work(store: Store) -> int:
        with Progress("replay", unit="events") as progress:
            report = await replay(store, apply=args.apply, page=args.page, on_page=progress.advance)
        for line in report.lines():
            print(line)
        return 0 if report.ok else 1

    return run_on_store(args, work, existing=True)
