"""The `--app` of the multi-process lane tests: targets whose handlers append one line
per delivery to the file named by LANES_OUT (O_APPEND: lines never interleave)."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from jobledger.domain.jobs import Job

PID = os.getpid()


def _record(job: Job) -> None:
    line = (
        json.dumps(
            {"pid": PID, "id": job.id, "target": job.target, "key": job.key, "version": job.version}
        )
        + "\n"
    )
    fd = os.open(os.environ["LANES_OUT"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


async def deliver(job: Job) -> None:
    _record(job)
    delay = float(os.environ.get("LANES_DELAY_S", "0"))
    if delay:
        await asyncio.sleep(delay)


def setup(engine: Any) -> None:
    engine.targets.register("mp:amo", "fast", deliver, delivery_mode="at_most_once")
    engine.targets.register("mp:alo", "fast", deliver, delivery_mode="at_least_once")
    engine.targets.register("mp:long", "long", deliver, delivery_mode="at_least_once")
