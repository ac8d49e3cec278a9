"""`jobledger export --since ISO --until ISO [--out FILE] [--after-position N]`.

Writes the matching events as JSON Lines (one `Event.to_json()` object a line) in log
order, to FILE or standard output. The last position written goes to standard error
(`last_position=N`): pass it as `--after-position` next time for an incremental export.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any, TextIO, cast

from jobledger.cli._audit import parse_time, positive, run_on_store
from jobledger.cli.progress import Progress, is_terminal
from jobledger.domain.errors import InvalidArgument
from jobledger.projections.audit import export_log
from jobledger.projections.log import DEFAULT_PAGE
from jobledger.storage.port import Store


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "export", help="write events as JSON Lines for auditors", description=__doc__
    )
    parser.add_argument("--since", default=None, help="first event time to include (ISO 8601)")
    parser.add_argument("--until", default=None, help="event time to stop before (ISO 8601)")
    parser.add_argument(
        "--after-position", type=int, default=0, help="only events after this position"
    )
    parser.add_argument("--out", default=None, help="file to write (default: standard output)")
    parser.add_argument("--page", type=positive, default=DEFAULT_PAGE, help="events read per page")
    parser.set_defaults(func=run)


class Counted:
    """The output file, advancing `progress` by one for each event line written."""

    def __init__(self, out: TextIO, progress: Progress) -> None:
        self.out = out
        self.progress = progress

    def write(self, line: str) -> int:
        self.progress.advance()
        return self.out.write(line)


def run(args: argparse.Namespace) -> int:
    since = parse_time(args.since) if args.since else None
    until = parse_time(args.until) if args.until else None
    if since and until and until <= since:
        raise InvalidArgument("--until must be after --since")
    if args.after_position < 0:
        raise InvalidArgument("--after-position must not be negative")

    async def work(store: Store) -> int:
        with contextlib.ExitStack() as stack:
            out: TextIO = (
                stack.enter_context(open(args.out, "w", encoding="utf-8"))
                if args.out
                else sys.stdout
            )
            # the bar goes to standard error; not when the events themselves fill the
            # same terminal (they are the progress then)
            shown = None if args.out or not is_terminal(sys.stdout) else False
            progress = stack.enter_context(Progress("export", unit="events", enabled=shown))
            report = await export_log(
                store,
                cast("TextIO", Counted(out, progress)),  # export_log only writes
                since=since,
                until=until,
                after_position=args.after_position,
                page=args.page,
            )
        last = report.last_position if report.last_position is not None else args.after_position
        print(f"exported {report.events} events; last_position={last}", file=sys.stderr)
        return 0

    return run_on_store(args, work, existing=True)
