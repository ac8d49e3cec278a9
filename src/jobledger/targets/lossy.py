"""Lossy targets: one try, dropped on failure, never written to the store.

`Engine.enqueue` writes nothing for a target registered with `lossy=True`; once the
caller's transaction commits it hands each item to `engine.lossy_handoff(item)` (a
rollback hands nothing over). A runner takes it from there:

* `InProcessLossyRunner`: a bounded asyncio queue in this process. Full queue → the item
  is dropped. With `JOBS_WORKERS=off` there is no consumer on this pod, so items are
  dropped at hand-off.
* `RedisLossyRunner` (when `lossy_redis_url` is set): XADD to a Redis stream read by a
  consumer group, so any pod with workers on runs it, including items handed over on a
  `JOBS_WORKERS=off` pod (closes G9: the consumer honours the switch).

Either way a handler runs at most once, inside `jobledger.core.context.job_context` (the
enqueuer's trace, its actor opened `via: system`). Every drop is counted
(`runner.dropped[reason]`, `Observer.lossy_dropped`) and logged; every run reports a
`RunRecord` (result `ok` or `dropped`) to `engine.observers`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jobledger.config.settings import Settings
from jobledger.core import context
from jobledger.core.ids import new_id
from jobledger.core.tasks import cancel_and_wait
from jobledger.domain.errors import UnknownTarget
from jobledger.domain.events import Actor
from jobledger.domain.jobs import Job, NewJob, Stamp
from jobledger.domain.timeutil import iso, parse_iso
from jobledger.observability.logs import log_run_line
from jobledger.observability.observe import RunRecord

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

DEFAULT_STREAM = "jobledger:lossy"
STOP_GRACE_S = 5.0  # a running lossy handler gets this long to finish at shutdown
DEFAULT_GROUP = "jobledger-lossy"


def lossy_job(
    engine: Engine,
    item: NewJob,
    *,
    job_id: str | None = None,
    at: datetime | None = None,
    ctx: context.RequestContext | None = None,
) -> Job:
    """The `Job` a lossy handler receives: built by the same pure `jobs.enqueued` as a
    stored job, so handlers cannot tell the difference; it is never written."""
    ctx = ctx or context.current()
    at = at or engine.clock.now()
    job_id = job_id or new_id(int(at.timestamp() * 1000))
    stamp = Stamp(at, ctx.actor, ctx.trace_id or context.new_trace_id())
    change = engine.enqueued_change(item, job_id=job_id, stamp=stamp, traceparent=ctx.traceparent)
    row: Job = change.row
    return row


def to_message(job: Job) -> str:
    """A lossy job as the JSON that travels through Redis."""
    return json.dumps(
        {
            "v": 1,
            "id": job.id,
            "at": iso(job.created_at),
            "target": job.target,
            "code": job.code,
            "key": job.key,
            "version": job.version,
            "payload": job.payload,
            "dedupe_key": job.dedupe_key,
            "headers": dict(job.headers) if job.headers else None,
            "run_at": iso(job.next_run_at) if job.next_run_at != job.created_at else None,
            "trace_id": job.trace_id,
            "traceparent": job.traceparent,
            "actor": job.actor.to_json() if job.actor else None,
        }
    )


def from_message(engine: Engine, text: str) -> Job:
    """The inverse of `to_message`; raises ValueError/KeyError/UnknownTarget when bad."""
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("v") != 1:
        raise ValueError("not a jobledger lossy message")
    item = NewJob(
        target=data["target"],
        payload=data.get("payload"),
        code=data.get("code"),
        key=data.get("key"),
        version=int(data.get("version") or 0),
        dedupe_key=data.get("dedupe_key"),
        headers=data.get("headers"),
        run_at=parse_iso(data["run_at"]) if data.get("run_at") else None,
    )
    ctx = context.RequestContext(
        data.get("trace_id"), data.get("traceparent"), Actor.from_json(data.get("actor"))
    )
    return lossy_job(engine, item, job_id=data["id"], at=parse_iso(data["at"]), ctx=ctx)


def default_consumer_name() -> str:
    """hostname:pid:uuid8, like the reference's pod id."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


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
        with context.job_context(job.trace_id, job.traceparent, job.actor):
            try:
                await target.handler(job)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
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


class RedisLossyRunner(LossyRunner):
    """XADD at hand-off; a consumer group spread over every pod with workers on.

    Each entry is read once (`>`), tried once, then XACK'd and XDEL'd whatever the
    result. An entry read by a consumer that died before acknowledging it is never
    run again: `reap()` (at start and every `reap_interval_s`) deletes entries idle for
    longer than `reap_idle_s` and counts them as `consumer_lost`.
    """

    def __init__(
        self,
        engine: Engine,
        url: str | None = None,
        *,
        stream: str = DEFAULT_STREAM,
        group: str = DEFAULT_GROUP,
        consumer: str | None = None,
        consume: bool | None = None,
        maxlen: int | None = None,
        batch: int = 10,
        block_ms: int = 1000,
        reap_idle_s: float = 300.0,
        reap_interval_s: float = 60.0,
    ) -> None:
        import redis.asyncio as aioredis

        super().__init__(engine, consume=engine.settings.workers if consume is None else consume)
        url = url or engine.settings.lossy_redis_url
        if not url:
            raise ValueError("RedisLossyRunner needs a Redis URL (lossy_redis_url)")
        self.redis: Any = aioredis.Redis.from_url(url, decode_responses=True)
        self.stream = stream
        self.group = group
        self.consumer = consumer or default_consumer_name()
        self.maxlen = maxlen or engine.settings.lossy_queue_size
        self.batch = batch
        self.block_ms = block_ms
        self.reap_idle_s = reap_idle_s
        self.reap_interval_s = reap_interval_s
        self._publishing: set[asyncio.Task[None]] = set()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._stopping = False

    # --- producing ------------------------------------------------------------------------
    def hand_off(self, item: NewJob) -> None:
        """Called after commit from the committing task: queue the XADD on the loop."""
        job = lossy_job(self.engine, item)
        task = asyncio.get_running_loop().create_task(self._publish(job))
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)

    async def _publish(self, job: Job) -> None:
        try:
            await self.redis.xadd(
                self.stream, {"job": to_message(job)}, maxlen=self.maxlen, approximate=True
            )
        except Exception as exc:
            self._drop(job.target, PUBLISH_FAILED, f"{type(exc).__name__}: {exc}")
            return
        self.handed_over += 1

    async def flush(self) -> None:
        """Wait for every XADD started so far."""
        while self._publishing:
            await asyncio.gather(*list(self._publishing), return_exceptions=True)

    # --- consuming ------------------------------------------------------------------------
    async def start(self) -> None:
        if not self.consume:
            logger.info("lossy consumer not started: JOBS_WORKERS=off (hand-off still publishes)")
            return
        if self._task is None:
            await self._ensure_group()
            await self.reap()
            self._task = asyncio.create_task(self._consume(), name="jobledger-lossy-redis")

    async def stop(self) -> None:
        """Let the consumer finish its current read (≤ `block_ms`) and run, then close.

        Cancelling a blocked XREADGROUP can leave redis-py waiting on the dead read, so
        the loop is asked to stop and only cancelled if it has not within the grace."""
        task, self._task = self._task, None
        if task is not None:
            self._stopping = True
            done, _ = await asyncio.wait({task}, timeout=self.block_ms / 1000 + STOP_GRACE_S)
            if not done:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self._stopping = False
        await self.flush()
        if not self._closed:
            self._closed = True
            await self.redis.aclose()

    async def _ensure_group(self) -> None:
        from redis.exceptions import ResponseError

        try:
            await self.redis.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def read_once(self, block_ms: int | None = None) -> int:
        """Read one batch and try each entry once; returns how many were read."""
        from redis.exceptions import ResponseError

        try:
            reply = await self.redis.xreadgroup(
                self.group,
                self.consumer,
                {self.stream: ">"},
                count=self.batch,
                block=self.block_ms if block_ms is None else block_ms,
            )
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            await self._ensure_group()
            return 0
        entries = _entries(reply)
        for entry_id, fields in entries:
            await self._handle(entry_id, fields)
        return len(entries)

    async def _consume(self) -> None:
        last_reap = time.monotonic()
        while not self._stopping:
            try:
                await self.read_once()
                if time.monotonic() - last_reap >= self.reap_interval_s:
                    last_reap = time.monotonic()
                    await self.reap()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("lossy consumer: Redis read failed; retrying")
                await self.engine.clock.sleep(1.0)

    async def _handle(self, entry_id: str, fields: Mapping[str, str]) -> None:
        try:
            job = from_message(self.engine, fields["job"])
        except Exception as exc:
            target = _target_of(fields)
            reason = UNKNOWN_TARGET if isinstance(exc, UnknownTarget) else BAD_MESSAGE
            self._drop(target, reason, f"{type(exc).__name__}: {exc}")
            await self._ack(entry_id)
            return
        try:
            await self._run_once(job)
        except asyncio.CancelledError:
            self._drop(job.target, SHUTDOWN, "stopped while running")
            with contextlib.suppress(Exception):
                await self._ack(entry_id)
            raise
        await self._ack(entry_id)

    async def _ack(self, entry_id: str) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.xack(self.stream, self.group, entry_id)
            pipe.xdel(self.stream, entry_id)
            await pipe.execute()

    async def reap(self, idle_s: float | None = None) -> int:
        """Delete entries another consumer read but never acknowledged (it died or was
        cut off) once idle for `idle_s`: they had their one chance. Returns the count."""
        min_idle = int((self.reap_idle_s if idle_s is None else idle_s) * 1000)
        start, reaped = "0-0", 0
        while True:
            reply = await self.redis.xautoclaim(
                self.stream, self.group, self.consumer, min_idle, start, count=100
            )
            start, claimed = reply[0], reply[1]
            for entry_id, fields in claimed:
                self._drop(_target_of(fields or {}), CONSUMER_LOST, "read but never acknowledged")
                await self._ack(entry_id)
                reaped += 1
            if start in ("0-0", b"0-0"):
                return reaped


def _entries(reply: Any) -> list[tuple[str, Mapping[str, str]]]:
    """XREADGROUP's reply for one stream, RESP2 (list) or RESP3 (dict) shaped."""
    if not reply:
        return []
    streams = reply.items() if isinstance(reply, dict) else reply
    result: list[tuple[str, Mapping[str, str]]] = []
    for _name, entries in streams:
        for entry in entries:
            entry_id, fields = entry[0], entry[1]
            result.append((entry_id, fields or {}))
    return result


def _target_of(fields: Mapping[str, str]) -> str:
    try:
        return str(json.loads(fields["job"])["target"])
    except Exception:
        return "?"


def install_lossy(engine: Engine, settings: Settings | None = None) -> LossyRunner:
    """Pick the runner for `settings` and hook it to `engine.lossy_handoff`.

    The caller starts it (`await runner.start()`) with the other workers and stops it
    on shutdown. With `settings.workers` False the consumer does not run; hand-off
    still publishes to Redis, or drops (counted, logged) in-process.
    """
    settings = settings or engine.settings
    runner: LossyRunner
    if settings.lossy_redis_url:
        runner = RedisLossyRunner(
            engine,
            settings.lossy_redis_url,
            consume=settings.workers,
            maxlen=settings.lossy_queue_size,
        )
    else:
        runner = InProcessLossyRunner(engine, settings.lossy_queue_size, consume=settings.workers)
    engine.lossy_handoff = runner.hand_off
    return runner
