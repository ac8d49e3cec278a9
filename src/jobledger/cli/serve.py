"""`jobledger serve`: the admin API and page, the lane workers and the schedule ticker,
on the configured store (SQLite file by default), until Ctrl-C or SIGTERM.

Targets and schedules are code: `--app module:attribute` names your `jobledger.App`
(a module in the current directory is found without PYTHONPATH; `module` alone means
`module:app`). `--setup` is the old spelling: a function called with the pod.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from typing import Any, TextIO

from jobledger.cli._audit import reach
from jobledger.cli._options import (
    add_app_option,
    add_http_options,
    add_stop_timeout_option,
    bind,
)
from jobledger.cli._stopping import StopDeadline, abandon, stop_on_signals

__all__ = ["add_http_options", "print_access"]


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "serve",
        help="serve the admin API and page with the workers and schedule ticker",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_http_options(parser)
    add_app_option(parser)
    parser.add_argument(
        "--no-workers",
        action="store_true",
        help="serve the API only: no lanes, no ticker (schedules still sync)",
    )
    add_stop_timeout_option(parser)
    parser.set_defaults(func=run)


def print_access(app: Any, base: str, out: TextIO) -> None:
    """Where the page is, and — when no key was configured — the generated admin key."""
    if app.generated_key:
        from jobledger.http.app import signin_path

        link = signin_path(app.http, app.generated_key)
        out.write(
            "No API key configured (JOBLEDGER_API_KEYS): generated an admin key for this run:\n"
            f"  {app.generated_key}\n"
            f"Admin page (one-time sign-in link, 10 min): {base}{link}\n"
        )
    else:
        out.write(f"Admin page: {base}/admin (sign in with an API key)\n")
    out.write(f"API: {base}/api/v1  ·  OpenAPI: {base}/api/v1/openapi.json\n")
    out.flush()


def run(args: argparse.Namespace) -> int:
    deadline = StopDeadline()
    try:
        return asyncio.run(_serve(args, deadline=deadline))
    finally:
        deadline.disarm()


async def _serve(
    args: argparse.Namespace, out: TextIO = sys.stdout, *, deadline: StopDeadline | None = None
) -> int:
    """Serve until SIGINT / SIGTERM; then stop within `stop_timeout_s` (`deadline`, when
    given, ends the process if the stop is still waiting then)."""
    from jobledger.app import App
    from jobledger.cli._load import load_app
    from jobledger.config.load import load_settings
    from jobledger.observability.logs import configure_logging
    from jobledger.reactors import gc_freeze

    settings = gc_freeze.own_process(load_settings(file=getattr(args, "config", None)))
    if getattr(args, "stop_timeout_s", None) is not None:
        settings = dataclasses.replace(settings, stop_timeout_s=args.stop_timeout_s)
    configure_logging(settings)
    user_app = load_app(args.app) if args.app else App()
    app = user_app.bind(settings, url=getattr(args, "store", None))
    await reach(app.store)
    sock = bind(args)
    stop = asyncio.Event()
    with stop_on_signals(stop, then=abandon(app.runtime)):
        await user_app.start(workers=False if args.no_workers else None)
        try:

            def ready(base: str) -> None:
                workers = "off" if args.no_workers or not settings.workers else "on"
                out.write(
                    f"jobledger serving {base} · store {app.store.name} · workers {workers}\n"
                )
                print_access(app, base, out)

            await app.serve_http(args.host, args.port, on_ready=ready, until=stop, sock=sock)
        finally:
            if deadline is not None:
                deadline.arm(settings.stop_timeout_s)
            await app.stop()
    out.write("jobledger stopped\n")
    return 0
