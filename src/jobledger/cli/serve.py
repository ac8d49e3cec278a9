"""`jobledger serve`: the admin API and page, the lane workers and the schedule ticker,
on the configured store (SQLite file by default), until Ctrl-C or SIGTERM.

Targets and schedules are code: `--setup package.module:function` names a function
that receives the `jobledger.app.App` before it starts and registers them
(`app.engine.targets.register(...)`, `app.scheduler.declare(...)`); it may be async.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import inspect
import signal
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TextIO

from jobledger.domain.errors import ConfigError

if TYPE_CHECKING:
    from jobledger.cli.worker import StopDeadline


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "serve",
        help="serve the admin API and page with the workers and schedule ticker",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_http_options(parser)
    parser.add_argument(
        "--setup",
        metavar="MODULE:FUNCTION",
        default=None,
        help="a function called with the App to register targets and schedules",
    )
    parser.add_argument(
        "--no-workers",
        action="store_true",
        help="serve the API only: no lanes, no ticker (schedules still sync)",
    )
    parser.set_defaults(func=run)


def add_http_options(parser: argparse.ArgumentParser, *, port: int = 8080) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=port, help=f"listen port (default {port}; 0 picks a free one)"
    )


def load_setup(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"--setup {spec!r}: expected package.module:function")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"--setup {spec!r}: {exc}") from exc
    if not callable(target):
        raise ConfigError(f"--setup {spec!r} is not callable")
    return target  # type: ignore[no-any-return]


@contextlib.contextmanager
def stop_on_signals(stop: asyncio.Event) -> Iterator[None]:
    """SIGINT / SIGTERM set `stop` (a second Ctrl-C still interrupts)."""
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


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
    from jobledger.cli.worker import StopDeadline

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
    from jobledger.app import build
    from jobledger.config.load import load_settings
    from jobledger.observability.logs import configure_logging

    settings = load_settings(file=getattr(args, "config", None))
    configure_logging(settings)
    app = build(settings, url=getattr(args, "store", None))
    if args.setup:
        result = load_setup(args.setup)(app)
        if inspect.isawaitable(result):
            await result
    stop = asyncio.Event()
    with stop_on_signals(stop):
        await app.start(workers=False if args.no_workers else None)
        try:

            def ready(base: str) -> None:
                workers = "off" if args.no_workers or not settings.workers else "on"
                out.write(
                    f"jobledger serving {base} · store {app.store.name} · workers {workers}\n"
                )
                print_access(app, base, out)

            await app.serve_http(args.host, args.port, on_ready=ready, until=stop)
        finally:
            if deadline is not None:
                deadline.arm(settings.stop_timeout_s)
            await app.stop()
    out.write("jobledger stopped\n")
    return 0
