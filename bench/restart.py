"""A pod restarted with 50 long at-least-once jobs in flight: how soon they all run again.

What a deploy does: one `jobledger worker` (default settings, but for `stop_timeout_s`,
see below) runs 50 long-lane jobs of an at-least-once target, each of which would take
10 minutes, on a fresh store each round (a new PostgreSQL database on the bench server,
or a new SQLite file). The bench sends it SIGINT, starts a new worker the moment the old
one has exited, and reads the handlers' delivery lines (the lane tests'
`tests.integration.multiprocess_app`: one line per run start, with the time). Measured:

* stop: SIGINT → the old worker's exit (the runs get 70 % of `stop_timeout_s` to
  finish; these do not, so they are cancelled);
* restart: the new worker's start → the 50th job started again;
* total: SIGINT → the 50th job started again.

Same-run baseline: `--baseline-src DIR` runs both workers of a round from another
source tree (the tree before this change, which leaves the claims in place on a stop,
so the new worker waits for the 5-minute claim lease), alternating with this tree;
only the first `--baseline-rounds` rounds run it, as each waits for that lease.

    .venv/bin/python bench/restart.py --store sqlite --rounds 5 --baseline-src ../base/src
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from takeover import fresh_url, print_sides, spawn  # puts this checkout on sys.path
from takeover import lines as starts
from tests.integration import multiprocess_app

from jobledger.config.settings import Settings
from jobledger.engine import Engine
from jobledger.storage.urls import open_store

RUN_S = 600.0  # every run outlives the stop


@dataclass
class Round:
    side: str
    stop: float
    restart: float | None
    total: float | None


async def wait_for(check: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        await asyncio.sleep(0.02)
    return False


async def one_round(
    kind: str, side: str, src: str | None, jobs: int, stop_timeout_s: float, work: Path
) -> Round:
    out = work / f"{side}-{uuid.uuid4().hex[:6]}.jsonl"
    procs: list[subprocess.Popen[bytes]] = []
    async with fresh_url(kind, work) as url:
        store = open_store(url)
        await store.open()
        try:
            engine = Engine(store, settings=Settings())
            multiprocess_app.setup(engine)
            settings = {"JOBLEDGER_STOP_TIMEOUT_S": str(stop_timeout_s)}
            old = spawn(url, "old", out, src, work / "old.log", long_run_s=RUN_S, settings=settings)
            procs.append(old)
            async with engine.transaction() as tx:
                for n in range(jobs):
                    await engine.enqueue("mp:long", {"n": n}, tx=tx)
            if not await wait_for(lambda: len(starts(out)) >= jobs, 120):
                raise RuntimeError(f"the old worker did not start the {jobs} jobs")
            sent = time.time()
            old.send_signal(signal.SIGINT)
            await asyncio.to_thread(old.wait, stop_timeout_s + 30)
            exited = time.time()
            new = spawn(url, "new", out, src, work / "new.log", long_run_s=RUN_S, settings=settings)
            procs.append(new)
            lease = Settings().long_lease_s
            again = await wait_for(lambda: len(starts(out)) >= 2 * jobs, lease + 120)
            last = max(float(s["t"]) for s in starts(out)) if again else None
            return Round(
                side,
                stop=exited - sent,
                restart=None if last is None else last - exited,
                total=None if last is None else last - sent,
            )
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
            await store.close()


def show(value: float | None) -> str:
    return "never" if value is None else f"{value:.2f}"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=("postgres", "sqlite"), default="sqlite")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of this tree")
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument(
        "--stop-timeout-s", type=float, default=2.0, help="the workers' stop_timeout_s"
    )
    parser.add_argument("--baseline-src", help="run the baseline side's workers from this src")
    parser.add_argument("--baseline-rounds", type=int, default=1, help="baseline rounds")
    args = parser.parse_args()
    main_task = asyncio.current_task()
    assert main_task is not None  # SIGTERM: stop the workers and drop the database first
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    print(
        f"store {args.store}; {args.jobs} jobs; stop_timeout_s {args.stop_timeout_s};"
        f" load average {os.getloadavg()}",
        flush=True,
    )
    rounds: list[Round] = []
    with tempfile.TemporaryDirectory(prefix="jobledger-restart-") as tmp:
        work = Path(tmp)
        for n in range(args.rounds):
            sides: list[tuple[str, str | None]] = [("this", None)]
            if args.baseline_src and n < args.baseline_rounds:
                sides.append(("baseline", args.baseline_src))
            for side, src in sides:
                r = await one_round(args.store, side, src, args.jobs, args.stop_timeout_s, work)
                rounds.append(r)
                print(
                    f"round {n + 1} {side}: stop {r.stop:.2f} s, restart → all running"
                    f" {show(r.restart)} s, SIGINT → all running {show(r.total)} s"
                    f" (load {os.getloadavg()[0]:.2f})",
                    flush=True,
                )
    print_sides(rounds, ("stop", "restart", "total"))
    this = [r.total for r in rounds if r.side == "this" and r.total is not None]
    base = [r.total for r in rounds if r.side == "baseline" and r.total is not None]
    if this and base:
        print(
            f"\nbaseline / this (total, medians): {statistics.median(base) / statistics.median(this):.1f}x"
        )
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    asyncio.run(main())
