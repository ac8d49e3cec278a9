"""Lossy targets: one try, dropped on failure, never written to the store.

`Engine.enqueue` writes nothing for a target registered with `lossy=True`; once the
caller's transaction commits it hands each item to `engine.lossy_handoff(item)` (a
rollback hands nothing over). A runner takes it from there:

* `InProcessLossyRunner`: a bounded asyncio queue in this process. Full queue → the item
  is dropped. With `JOBS_WORKERS=off` there is no consumer on this pod, so items are
  dropped at hand-off.
* `RedisLossyRunner` (targets/lossy/redis_stream.py, when `lossy_redis_url` is set): XADD to a
  Redis stream read by a consumer group, so any pod with workers on runs it, including
  items handed over on a `JOBS_WORKERS=off` pod (the consumer honours the switch).

Either way a handler runs at most once, inside `jobledger.core.context.job_context` (the
enqueuer's trace, its actor opened `via: system`). Every drop is counted
(`runner.dropped[reason]`, `Observer.lossy_dropped`) and logged; every run reports a
`RunRecord` (result `ok` or `dropped`) to `engine.observers`.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from datetime import datetime
from typing import TYPE_CHECKING

from jobledger.core import context
from jobledger.core.ids import new_id
from jobledger.core.tasks import cancel_and_wait
from jobledger.domain.jobs import Job, NewJob, Stamp
from jobledger.observability.logs import log_run_line
from jobledger.observability.observe import RunRecord
from jobledger.observability.tracing import traced_run

if TYPE_CHECKING:
    from jobledger.engine import Engine

logger = logging.getLogger("jobledger.lossy")

# reasons a lossy item is dropped (the `reason` label of jobledger_lossy_dropped_total)
HANDLER_FAILED = "handler_failed"
QUEUE_FULL = "queue_full"
WORKERS_OFF = "workers_off"
SHUTDOWN = "shutdown"
PUBLISH_FAILED = "publish_failed"
BAD_MESSAGE = "bad_message"
UNKNOWN_TARGET = "unknown_target"
CONSUMER_LOST = "consumer_lost"


def lossy_job(
    engine: Engine,
    item: NewJob,
    *,
    job_id: str | None = None,
    at: datetime | None = None,
    ctx: context.RequestContext | None = None,
) -> Job:
    """The `Job` a lossy handler receives: built by the same pure `job_commands.enqueued` as a
    stored job, so handlers cannot tell the difference; it is never written."""
    ctx = ctx or context.current()
    at = at or engine.clock.now()
    job_id = job_id or new_id(int(at.timestamp() * 1000))
    stamp = Stamp(at, ctx.actor, ctx.trace_id or context.new_trace_id())
    change = engine.enqueued_change(item, job_id=job_id, stamp=stamp, traceparent=ctx.traceparent)
    row: Job = change.row
    return row


class LossyRunner:
    """What both runners share: counters, the drop path and the one try."""

    def __init__(self, engine: Engine, *, consume: bool) -> None:
        self.engine = engine
        self.consume = consume
        self.handed_over = 0
        self.delivered = 0
        self.dropped: collections.Counter[str] = collections.Counter()

    def hand_off(self, item: NewJob) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    async def start(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    async def stop(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _drop(self, target: str, reason: str, detail: str = "") -> None:
        self.dropped[reason] += 1
        logger.warning(
            "lossy job dropped target=%s reason=%s%s",
            target,
            reason,
            f" error={detail}" if detail else "",
            extra={"target": target, "reason": reason, "error": detail or None},
        )
        self.engine.observers.lossy_dropped(target, reason)

    async def _run_once(self, job: Job) -> bool:
        """Run the handler once; True when it returned. Never raises an Exception."""
        target = self.engine.targets.find(job.target)
        if target is None:
            self._drop(job.target, UNKNOWN_TARGET, "target is not registered on this pod")
            return False
        started_at = self.engine.clock.now()
        began = time.perf_counter()
        error: str | None = None
        with (
            context.job_context(job.trace_id, job.traceparent, job.actor),
            traced_run(self.engine.observers, job) as span,
        ):
            try:
                await target.handler(job)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                span.failed(exc)
        duration_ms = (time.perf_counter() - began) * 1000
        record = RunRecord(
            job, "ok" if error is None else "dropped", duration_ms, 1, error, started_at
        )
        log_run_line(record)
        self.engine.observers.run_finished(record)
        if error is not None:
            self._drop(job.target, HANDLER_FAILED, error)
            return False
        self.delivered += 1
        return True


class InProcessLossyRunner(LossyRunner):
    """A bounded queue in this process, drained by `concurrency` consumer tasks."""

    def __init__(
        self,
        engine: Engine,
        maxsize: int | None = None,
        *,
        consume: bool | None = None,
        concurrency: int = 1,
    ) -> None:
        super().__init__(engine, consume=engine.settings.workers if consume is None else consume)
        self.maxsize = maxsize or engine.settings.lossy_queue_size
        self.concurrency = max(concurrency, 1)
        self._queue: asyncio.Queue[Job] = asyncio.Queue(self.maxsize)
        self._tasks: list[asyncio.Task[None]] = []

    def hand_off(self, item: NewJob) -> None:
        if not self.consume:
            self._drop(item.target, WORKERS_OFF, "JOBS_WORKERS=off and no lossy Redis URL")
            return
        job = lossy_job(self.engine, item)
        try:
            self._queue.put_nowait(job)
        except asyncio.QueueFull:
            self._drop(item.target, QUEUE_FULL, f"queue holds {self.maxsize} items")
            return
        self.handed_over += 1

    async def start(self) -> None:
        if not self.consume:
            logger.info("lossy consumer not started: JOBS_WORKERS=off")
            return
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._work(), name=f"jobledger-lossy-{n}")
                for n in range(self.concurrency)
            ]

    async def join(self) -> None:
        """Wait until every item handed over so far was tried (tests, shutdown)."""
        await self._queue.join()

    async def stop(self) -> None:
        """Stop the consumers. Items still queued (or mid-run) are dropped and counted."""
        tasks, self._tasks = self._tasks, []
        await cancel_and_wait(*tasks)
        while not self._queue.empty():
            job = self._queue.get_nowait()
            self._queue.task_done()
            self._drop(job.target, SHUTDOWN, "still queued at shutdown")

    async def _work(self) -> None:
        while True:
            job = await self._queue.get()
            try:
                await self._run_once(job)
            except asyncio.CancelledError:
                self._drop(job.target, SHUTDOWN, "stopped while running")
                raise
            finally:
                self._queue.task_done()
