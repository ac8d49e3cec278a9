"""The `--app` of the chaos harness: two Kafka targets and one every-minute schedule.

* `kafka:chaos.amo` — at-most-once (jobs of code `chaos_amo`);
* `kafka:chaos.alo` — at-least-once (jobs of code `chaos_alo`);
* schedule `chaos_tick`, cron `* * * * *`: its handler appends one line per run to the
  file named by CHAOS_SLOTS (O_APPEND, so lines of several pods never interleave).

The broker comes from the settings (JOBLEDGER_KAFKA_BOOTSTRAP). The Kafka target is
added to the pod's reactors, so the runtime starts and stops its producer.

With CHAOS_ACKS set, every record the broker acknowledged is logged there (one JSON line:
job id, topic, partition, offset, time, pid) before the handler returns, so before the
job's outcome can be committed: a job that succeeded with no line was marked succeeded
without an acknowledgement (tests/chaos/checks.py, `classify_lost`).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from jobledger.domain.jobs import DeliveryMode
from jobledger.targets.kafka.target import KafkaEvent, KafkaTarget, install_kafka

AMO_TOPIC = "chaos.amo"
ALO_TOPIC = "chaos.alo"
AMO_TARGET = f"kafka:{AMO_TOPIC}"
ALO_TARGET = f"kafka:{ALO_TOPIC}"
SCHEDULE = "chaos_tick"
CRON = "* * * * *"
EVENTS = [
    KafkaEvent("chaos_amo", AMO_TOPIC, DeliveryMode.AT_MOST_ONCE),
    KafkaEvent("chaos_alo", ALO_TOPIC, DeliveryMode.AT_LEAST_ONCE),
]


async def run_slot(run: Any) -> None:
    path = os.environ.get("CHAOS_SLOTS")
    if not path:
        return
    line = json.dumps({"pid": os.getpid(), "job": run.job.id, "slot": run.slot.isoformat()})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def ack_logger(path: str) -> Any:
    """`KafkaTarget.on_ack` writing one line per acknowledged record to `path`."""

    def log_ack(job: Any, meta: Any) -> None:
        line = json.dumps(
            {
                "job": job.id,
                "topic": meta.topic,
                "partition": meta.partition,
                "offset": meta.offset,
                "at": time.time(),
                "pid": os.getpid(),
            }
        )
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)

    return log_ack


def setup(engine: Any, app: Any = None) -> KafkaTarget:
    """Register the targets (and, with the app, the schedule and the producer's life)."""
    target = install_kafka(engine, EVENTS, bootstrap=None)
    acks = os.environ.get("CHAOS_ACKS")
    if acks:
        target.on_ack = ack_logger(acks)
    if app is not None:
        # run_once: a slot that falls inside a PostgreSQL restart is still enqueued once
        # the ticker is back, so every run has slots to check (skip would drop it)
        app.scheduler.declare(SCHEDULE, CRON, run_slot, missed_slot_policy="run_once")
        if app.runtime is not None:
            app.runtime.services.append(target)  # stopped after the last in-flight send
    return target
