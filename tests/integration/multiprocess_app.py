"""The `--app` of the multi-process lane tests: targets whose handlers append one line
per delivery to the file named by LANES_OUT (O_APPEND: lines never interleave).

LANES_DELAY_S makes each delivery take that long (an await), LANES_LONG_DELAY_S each
long-lane run (LANES_DELAY_S when unset). LANES_STALL=<seconds>@<n>
stalls the whole process once, at its n-th delivery, with a blocking sleep: the event
loop stops as in a long GC pause or a starved CPU, so the heartbeat cannot renew the
partition leases and other workers take them over while this one is mid-round."""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from jobledger.domain.jobs import Job

PID = os.getpid()
_delivered = 0


def _record(job: Job) -> None:
    line = (
        json.dumps(
            {
                "pid": PID,
                "id": job.id,
                "target": job.target,
                "key": job.key,
                "version": job.version,
                "partition": job.partition,
                "lane": job.lane.value,
                "t": time.time(),
            }
        )
        + "\n"
    )
    fd = os.open(os.environ["LANES_OUT"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _stall() -> None:
    global _delivered
    _delivered += 1
    stall = os.environ.get("LANES_STALL")
    if stall:
        seconds, _, at = stall.partition("@")
        if _delivered == int(at):
            time.sleep(float(seconds))  # blocks the event loop: leases lapse meanwhile


async def deliver(job: Job) -> None:
    _record(job)
    _stall()
    delay = float(os.environ.get("LANES_DELAY_S", "0"))
    if delay:
        await asyncio.sleep(delay)


async def run_long(job: Job) -> None:
    _record(job)
    await asyncio.sleep(float(os.environ.get("LANES_LONG_DELAY_S", "0")))


def setup(engine: Any) -> None:
    long = run_long if "LANES_LONG_DELAY_S" in os.environ else deliver
    engine.targets.register("mp:amo", "fast", deliver, delivery_mode="at_most_once")
    engine.targets.register("mp:alo", "fast", deliver, delivery_mode="at_least_once")
    engine.targets.register("mp:long", "long", long, delivery_mode="at_least_once")
    engine.targets.register("mp:long_amo", "long", long, delivery_mode="at_most_once")
