"""`jobledger demo`: the engine end to end on an embedded SQLite file, in seconds.

It registers three demo targets — `demo:email` (always succeeds), `demo:webhook`
(fails twice, then succeeds) and `demo:ledger-sync` (always fails, so it goes DEAD) —
and a demo schedule, then places sample orders: each order row and its jobs are written
in ONE business transaction on the store (table `demo_orders`). Retry delays are cut
to seconds so that retries and DEAD rows show up at once; two orders also get a
reminder job due in an hour, so PENDING rows are there to cancel. A progress bar
(on a terminal) follows the jobs as the store's log records them, so jobs settled by
another worker on the same store count too; `--no-serve` exits with status 1 when it
is stopped before every job settled. The admin page's address (with a generated admin
key when none is configured) is printed, and the demo keeps serving until Ctrl-C.

    jobledger demo                       # sqlite:///jobledger-demo.db, port 8080
    jobledger demo --no-serve            # run the jobs, print the summary, exit
    jobledger demo --exit-after 20       # serve for 20 seconds, then exit
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import inspect
import logging
import os
import secrets
import sqlite3
import sys
import time
from datetime import timedelta
from typing import Any, TextIO

from jobledger.cli._audit import reach
from jobledger.cli._demo_settle import Tally, follow
from jobledger.cli._options import bind
from jobledger.cli._stopping import stop_on_signals
from jobledger.cli.serve import add_http_options, print_access
from jobledger.domain.errors import ConfigError
from jobledger.domain.jobs import Job

DEMO_STORE = "sqlite:///jobledger-demo.db"
EMAIL, WEBHOOK, LEDGER = "demo:email", "demo:webhook", "demo:ledger-sync"
RETRY_DELAYS_MINUTES = (1 / 60, 2 / 60, 3 / 60)  # 1 s, 2 s, 3 s
LEDGER_RUNS = 3  # demo:ledger-sync is DEAD after its 3rd failed run
WEBHOOK_FAILURES = 2
SCHEDULE = ("demo_digest", "* * * * *")


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "demo",
        help="run demo targets, jobs and a schedule on SQLite and serve the admin page",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_http_options(parser)
    parser.add_argument(
        "--orders", type=int, default=12, help="sample orders to place (default 12)"
    )
    parser.add_argument(
        "--no-serve",
        action="store_true",
        help="no HTTP: run until every demo job settled, print a summary, exit",
    )
    parser.add_argument(
        "--exit-after",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop after this many seconds (for scripts and tests)",
    )
    parser.set_defaults(func=run)


# --- the demo targets ---------------------------------------------------------------------


async def send_email(job: Job) -> None:
    await asyncio.sleep(0.05)


async def call_webhook(job: Job) -> None:
    await asyncio.sleep(0.05)
    if job.attempts < WEBHOOK_FAILURES:
        raise RuntimeError(f"partner answered HTTP 503 (attempt {job.attempts + 1})")


async def sync_ledger(job: Job) -> None:
    await asyncio.sleep(0.1)
    raise RuntimeError("ledger rejected the entry: account 4711 is closed")


async def remind(job: Job) -> None:
    return None


async def digest(run: Any) -> None:
    return None


def setup(app: Any) -> None:
    """Register the demo targets and schedule on a built App."""
    targets = app.engine.targets
    targets.register(EMAIL, "fast", send_email)
    targets.register(WEBHOOK, "fast", call_webhook, delivery_mode="at_least_once")
    targets.register(LEDGER, "long", sync_ledger, delivery_mode="at_least_once")
    targets.register("demo:reminder", "long", remind, delivery_mode="at_least_once")
    targets.set_max_attempts(LEDGER, LEDGER_RUNS)
    app.scheduler.declare(SCHEDULE[0], SCHEDULE[1], digest, runs_per_slot=1)


# --- business transactions -----------------------------------------------------------------

CREATE = (
    "CREATE TABLE IF NOT EXISTS demo_orders (id TEXT PRIMARY KEY, customer TEXT NOT NULL,"
    " total_cents INTEGER NOT NULL, placed_at TEXT NOT NULL)"
)
INSERT = "INSERT INTO demo_orders (id, customer, total_cents, placed_at) VALUES (?, ?, ?, ?)"
CUSTOMERS = ["ada", "grace", "edsger", "barbara", "ken", "margaret", "dennis", "frances"]


async def _write_order(tx: Any, order: dict[str, Any]) -> None:
    """The business row, on the store's own transaction handle."""
    native = tx.native
    values = (order["id"], order["customer"], order["total_cents"], order["placed_at"])
    if isinstance(native, sqlite3.Connection):
        native.execute(CREATE)
        native.execute(INSERT, values)
    elif hasattr(native, "insert"):  # the memory store's transaction
        native.insert("demo_orders", order)
    elif inspect.iscoroutinefunction(getattr(native, "execute", None)):  # psycopg
        await native.execute(CREATE.replace("INTEGER", "BIGINT"))
        await native.execute(INSERT.replace("?", "%s"), values)
    # other stores (MongoDB): the demo writes its jobs only


@dataclasses.dataclass(frozen=True, slots=True)
class Placed:
    orders: int
    settling: list[str]  # ids of the jobs that end (succeed or go DEAD) within seconds
    later: int  # reminder jobs due in an hour (PENDING, cancellable)


async def place_orders(app: Any, count: int, run_id: str) -> Placed:
    engine = app.engine
    settling: list[str] = []
    later = 0
    for n in range(1, count + 1):
        order_id = f"ord-{run_id}-{n:03d}"
        order = {
            "id": order_id,
            "customer": CUSTOMERS[n % len(CUSTOMERS)],
            "total_cents": 1999 + 250 * n,
            "placed_at": engine.clock.now().isoformat(),
        }
        async with engine.transaction() as tx:
            await _write_order(tx, order)
            job = await engine.enqueue(
                EMAIL,
                {"order": order_id, "template": "order_placed"},
                tx=tx,
                key=order_id,
                dedupe_key=f"{order_id}:email",
            )
            settling.append(job.job_id)
            if n % 3 == 0:
                job = await engine.enqueue(
                    WEBHOOK,
                    {"order": order_id, "event": "order.placed"},
                    tx=tx,
                    key=order_id,
                    version=1,
                    dedupe_key=f"{order_id}:webhook",
                )
                settling.append(job.job_id)
            if n % 4 == 0:
                job = await engine.enqueue(
                    LEDGER,
                    {"order": order_id, "cents": order["total_cents"]},
                    tx=tx,
                    key=order_id,
                    dedupe_key=f"{order_id}:ledger",
                )
                settling.append(job.job_id)
            if n in (1, 2):
                await engine.enqueue(
                    "demo:reminder",
                    {"order": order_id},
                    tx=tx,
                    dedupe_key=f"{order_id}:reminder",
                    run_at=engine.clock.now() + timedelta(hours=1),
                )
                later += 1
    return Placed(count, settling, later)


# --- the command ---------------------------------------------------------------------------


class _RunLinesWithoutTracebacks(logging.Filter):
    """The demo's handlers fail on purpose: their run lines go to the console without the
    exception's traceback (the job's page shows it), so a failure does not read as a
    crash of the demo."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info = None
        record.exc_text = None
        return True


def run(args: argparse.Namespace) -> int:
    if args.orders < 1:
        raise ConfigError("--orders must be at least 1")
    quiet = _RunLinesWithoutTracebacks()
    run_log = logging.getLogger("jobledger.run")
    run_log.addFilter(quiet)
    try:
        return asyncio.run(_demo(args))
    finally:
        run_log.removeFilter(quiet)


async def _demo(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    from jobledger.app import build
    from jobledger.config.load import load_settings

    settings = load_settings(file=getattr(args, "config", None))
    settings = dataclasses.replace(
        settings,
        retry_delays_minutes=RETRY_DELAYS_MINUTES,
        schedule_tick_s=1.0,
        workers=True,
    )
    url = getattr(args, "store", None) or os.environ.get("JOBLEDGER_STORE") or DEMO_STORE
    app = build(settings, url=url)
    setup(app)
    await reach(app.store)
    sock = None if args.no_serve else bind(args)
    started = time.monotonic()
    stop = asyncio.Event()
    with stop_on_signals(stop):
        await app.start()
        try:
            return await _run(app, args, url, stop, started, out, sock)
        finally:
            await app.stop()
            out.write("jobledger demo stopped\n")
            out.flush()


async def _run(
    app: Any,
    args: argparse.Namespace,
    url: str,
    stop: asyncio.Event,
    started: float,
    out: TextIO,
    sock: Any = None,
) -> int:
    if args.exit_after is not None:
        asyncio.get_running_loop().call_later(max(args.exit_after, 0.0), stop.set)
    out.write(f"jobledger demo on {url}\n")
    early = False  # --no-serve stopped before every job settled: exit status 1
    http: asyncio.Task[None] | None = None
    if not args.no_serve:
        ready = asyncio.Event()

        def on_ready(base: str) -> None:
            out.write(f"Serving the admin API and page on {base}\n")
            print_access(app, base, out)
            ready.set()

        http = asyncio.create_task(
            app.serve_http(args.host, args.port, on_ready=on_ready, until=stop, sock=sock)
        )
        waiter = asyncio.create_task(ready.wait())
        await asyncio.wait({http, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if http.done():
            await http  # the bind error
            return 1
    placed = await place_orders(app, args.orders, secrets.token_hex(3))
    out.write(
        f"Placed {placed.orders} orders in business transactions (table demo_orders):"
        f" {len(placed.settling)} jobs to run now, {placed.later} reminders due in an hour.\n"
    )
    out.flush()
    tally = await Tally.start(app.store, placed.settling)
    if await follow(tally, out, stop):
        out.write(
            f"All {tally.total} demo jobs settled in {time.monotonic() - started:.1f}s:"
            f" {tally.ok} succeeded, {tally.dead} DEAD (retry or skip them on the admin page).\n"
        )
        if args.no_serve:
            stop.set()
        elif args.exit_after is None:
            out.write("Serving until Ctrl-C.\n")
        out.flush()
    else:
        out.write(f"Stopped with {tally.settled} of {tally.total} demo jobs settled.\n")
        early = args.no_serve
    await stop.wait()
    if http is not None:
        await http
    return 1 if early else 0
