"""The Redis lossy runner: hand-off XADDs to a stream, a consumer group runs each entry once.

`install_lossy` (targets/lossy/install.py) picks this runner when `lossy_redis_url` is set. The
stream carries each lossy job as the JSON of `to_message`; `from_message` rebuilds the
same `Job` with the pure `job_commands.enqueued`, so a handler cannot tell which pod enqueued it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from jobledger.core import context
from jobledger.domain.errors import UnknownTarget
from jobledger.domain.events import Actor
from jobledger.domain.jobs import Job, NewJob
from jobledger.domain.timeutil import iso, parse_iso
from jobledger.targets.lossy.runner import (
    BAD_MESSAGE,
    CONSUMER_LOST,
    PUBLISH_FAILED,
    SHUTDOWN,
    UNKNOWN_TARGET,
    LossyRunner,
    lossy_job,
)

if TYPE_CHECKING:
    from jobledger.engine import Engine

logger = logging.getLogger("jobledger.lossy")

DEFAULT_STREAM = "jobledger:lossy"
STOP_GRACE_S = 5.0  # a running lossy handler gets this long to finish at shutdown
DEFAULT_GROUP = "jobledger-lossy"


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
    """hostname:pid:uuid8: unique per process, readable in `XINFO CONSUMERS`."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


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
