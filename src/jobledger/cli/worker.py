"""`jobledger worker`: run the lanes (and the schedule ticker) of one pod until SIGTERM.

    jobledger --store sqlite:///jobs.db worker --app myapp:app

`--app module:attribute` names your `jobledger.App` (its targets and schedules); a
module in the current directory is found without PYTHONPATH, and `module` alone means
`module:app`. A setup function `setup(engine, app=None)` is still accepted.

Settings come from the config file (`--config`/JOBLEDGER_CONFIG) and the environment
(`JOBLEDGER_<NAME>`, `JOBS_WORKERS=off` for an enqueue-only pod); the store from
`--store`/JOBLEDGER_STORE. SIGTERM or SIGINT stops taking work, finishes what is in
flight, releases the partitions and removes the pod's liveness row — within
`stop_timeout_s` (--stop-timeout-s, JOBLEDGER_STOP_TIMEOUT_S, 10 s). Long-lane runs of
at-least-once targets still going at 70 % of it are cancelled and given back: PENDING,
due now, no attempt spent, so the next pod (or this one restarted) starts them at once.
A stop still waiting at the timeout (on a database or broker that does not answer) is
cut short and the process exits with status 1; its leases expire and other pods take
its rows over. A second SIGINT or SIGTERM during the stop says in one line what it
abandons and exits at once (status 128 + the signal's number).

`--metrics-port PORT` (or JOBLEDGER_METRICS_PORT; 0, the default, serves nothing)
serves this worker's /metrics, /healthz and /readyz on 127.0.0.1 (--metrics-host or
JOBLEDGER_METRICS_HOST to listen elsewhere), from a thread of its own: it answers
while a handler blocks the event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
from typing import Any

from jobledger.cli._options import add_app_option, add_stop_timeout_option, port
from jobledger.cli._stopping import StopDeadline, abandon, stop_on_signals

__all__ = ["register", "run"]

logger = logging.getLogger("jobledger.worker")


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "worker",
        help="run the fast lane, the long lane and the schedule ticker",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_app_option(parser)
    parser.add_argument("--pod-id", default=None, help="pod id (default hostname:pid:uuid8)")
    parser.add_argument(
        "--log-level", default=None, help="logging level (default: the log_level setting)"
    )
    parser.add_argument(
        "--metrics-port",
        type=port,
        default=None,
        help="serve /metrics, /healthz, /readyz on this port (default: the metrics_port"
        " setting, 0 = off)",
    )
    parser.add_argument(
        "--metrics-host",
        default=None,
        help="address of the metrics server (default: the metrics_host setting, 127.0.0.1)",
    )
    add_stop_timeout_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from jobledger.app import App
    from jobledger.cli._audit import reach
    from jobledger.cli._load import load_app
    from jobledger.config.load import load_settings
    from jobledger.observability.logs import configure_logging
    from jobledger.reactors import gc_freeze

    settings = gc_freeze.own_process(load_settings(file=args.config))
    if args.log_level:
        settings = dataclasses.replace(settings, log_level=str(args.log_level).upper())
    if args.metrics_port is not None:
        settings = dataclasses.replace(settings, metrics_port=args.metrics_port)
    if args.metrics_host:
        settings = dataclasses.replace(settings, metrics_host=args.metrics_host)
    if args.stop_timeout_s is not None:
        settings = dataclasses.replace(settings, stop_timeout_s=args.stop_timeout_s)
    configure_logging(settings)
    app = load_app(args.app) if args.app else App()
    app.bind(settings, url=args.store, pod_id=args.pod_id)
    deadline = StopDeadline()
    server = _metrics_server(app.pod, settings.metrics_host, settings.metrics_port)

    async def main() -> None:
        if server is not None:
            server.attach(asyncio.get_running_loop())
        await reach(app.pod.store)
        stop = asyncio.Event()
        with stop_on_signals(stop, then=abandon(app.pod.runtime)):
            try:
                await app.start()
                pod = app.pod.runtime.pod
                on = "on" if settings.workers else "off"
                logger.info("worker %s running (workers %s)", pod, on)
                await stop.wait()
            finally:
                deadline.arm(settings.stop_timeout_s)
                await app.stop()

    try:
        asyncio.run(main())
    finally:
        deadline.disarm()  # only once asyncio.run has cancelled and awaited every task
        if server is not None:
            server.stop()
    return 0


def _metrics_server(pod: Any, host: str, metrics_port: int) -> Any:
    """The started metrics server of `pod`, or None when `metrics_port` is 0; bound
    before the pod starts, so a taken port is one line and exit 2."""
    if not metrics_port:
        return None
    from jobledger.observability.metrics_server import worker_server

    server = worker_server(pod, host, metrics_port)
    server.start()
    bound_host, bound_port = server.address
    logger.info(
        "metrics on http://%s:%d (/metrics, /healthz, /readyz)",
        f"[{bound_host}]" if ":" in bound_host else bound_host,
        bound_port,
    )
    return server
