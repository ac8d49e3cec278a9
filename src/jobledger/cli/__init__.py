"""The `jobledger` command. Each subcommand is a module of this package exposing

    def register(sub: argparse._SubParsersAction) -> None   # adds its parser, sets func

so that parts of the engine add commands without touching one shared file. A module
without `register` (e.g. `progress`) is a helper the commands share.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from jobledger.cli._options import add_global_options
from jobledger.domain.errors import JobledgerError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jobledger",
        description="An event-sourced job engine: transactional enqueue, ordered lanes,"
        " cron schedules and an append-only audit log.",
    )
    add_global_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "register"):  # a helper module (e.g. progress) adds no command
            module.register(sub)
    for command in sub.choices.values():
        add_global_options(command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        result = args.func(args)
    except JobledgerError as exc:
        print(f"jobledger: {exc.code}: {exc.message}", file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.filename is None:  # not about a file the user named: a real fault
            raise
        print(f"jobledger: {exc.strerror or exc}: {exc.filename}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return int(result or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
