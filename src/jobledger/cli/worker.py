"""`jobledger worker`: run the lanes (and the schedule ticker) of one pod until SIGTERM.

    jobledger --store sqlite:///jobs.db worker --app myapp.jobs:setup

`--app module:function` names the function that registers your targets and schedules.
It is called once, before anything starts, with the engine — and, when it takes a
second parameter, with the whole app (`app.scheduler.declare(...)`):

    def setup(engine, app=None):
        engine.targets.register("kafka:orders", "fast", send_order)
        if app is not None:
            app.scheduler.declare("nightly", "0 2 * * *", nightly)

Settings come from the config file (`--config`/JOBLEDGER_CONFIG) and the environment
(`JOBLEDGER_<NAME>`, `JOBS_WORKERS=off` for an enqueue-only pod); the store from
`--store`/JOBLEDGER_STORE. SIGTERM or SIGINT stops taking work, finishes what is in
flight, releases the partitions and removes the pod's liveness row — within
`stop_timeout_s` (JOBLEDGER_STOP_TIMEOUT_S, 10 s): a stop still waiting then (on a
database or broker that does not answer) is cut short and the process exits with
status 1; its leases expire and other pods take its rows over.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import importlib
import inspect
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from jobledger.domain.errors import ConfigError

logger = logging.getLogger("jobledger.worker")

#: exit status of a process whose stop outlived `stop_timeout_s`
EXIT_STOP_TIMEOUT = 1


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "worker",
        help="run the fast lane, the long lane and the schedule ticker",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--app", default=None, help="module:function that registers targets")
    parser.add_argument("--pod-id", default=None, help="pod id (default hostname:pid:uuid8)")
    parser.add_argument(
        "--log-level", default=None, help="logging level (default: the log_level setting)"
    )
    parser.set_defaults(func=run)


def load_app_function(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"--app {spec!r}: expected module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"--app {spec!r}: cannot import {module_name}: {exc}") from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(f"--app {spec!r}: {attr} is not a function of {module_name}")
    return fn  # type: ignore[no-any-return]


class StopDeadline:
    """Ends the process `timeout_s` after `arm()` unless `disarm()` came first.

    A timer thread, not a task: it fires even when the event loop is blocked, or when
    `asyncio.run` waits at exit for tasks that ignore their cancellation.
    """

    def __init__(self) -> None:
        self._timer: threading.Timer | None = None

    def arm(self, timeout_s: float) -> None:
        if self._timer is None:
            self._timer = threading.Timer(timeout_s, _exit_late, (timeout_s,))
            self._timer.daemon = True
            self._timer.start()

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def _exit_late(timeout_s: float) -> None:
    logger.error(
        "stop not finished within stop_timeout_s=%gs: exiting now; this pod's partition"
        " and long-lane leases expire and other pods take its rows over",
        timeout_s,
    )
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(EXIT_STOP_TIMEOUT)


def _call_setup(fn: Callable[..., Any], app: Any) -> Any:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]
    return fn(app.engine, app) if len(params) >= 2 else fn(app.engine)


def run(args: argparse.Namespace) -> int:
    from jobledger.app import build
    from jobledger.config.load import load_settings
    from jobledger.observability.logs import configure_logging
    from jobledger.reactors.runtime import wait_for_signal

    settings = load_settings(file=args.config)
    if args.log_level:
        settings = dataclasses.replace(settings, log_level=str(args.log_level).upper())
    configure_logging(settings)
    app = build(settings, url=args.store, pod_id=args.pod_id)
    setup = load_app_function(args.app) if args.app else None
    deadline = StopDeadline()

    async def main() -> None:
        if setup is not None:
            result = _call_setup(setup, app)
            if inspect.isawaitable(result):
                await result
        try:
            await app.start()
            pod = getattr(app.runtime, "pod", "?")
            logger.info("worker %s running (workers %s)", pod, "on" if settings.workers else "off")
            await wait_for_signal()
        finally:
            deadline.arm(settings.stop_timeout_s)
            await app.stop()

    try:
        asyncio.run(main())
    finally:
        deadline.disarm()  # only once asyncio.run has cancelled and awaited every task
    return 0
