"""The change feed: LISTEN on a dedicated connection, fanned out through a LocalFeed.

A notification is a hint, never the truth. When the connection is lost the listener
reconnects and publishes `EVERYTHING`, because notifications sent meanwhile are gone.

The listener is the feed's source: it connects when the first subscriber opens and
closes when the last one leaves, so a process that only enqueues (a web process)
holds no LISTEN connection and is not sent its own NOTIFYs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import psycopg

from jobledger.core.tasks import cancel_and_wait
from jobledger.domain.jobs import Lane
from jobledger.storage.feed import EVERYTHING, LocalFeed, Wake
from jobledger.storage.jsontext import loads
from jobledger.storage.postgres.encode import hint_jobs

logger = logging.getLogger("jobledger.storage.postgres")


def parse_wake(payload: str) -> Wake:
    """A NOTIFY payload (`{"p": [...], "l": [...], "s": bool}`, with `"e": [event]`
    after a single enqueue: `encode.hint_payload`, or `*`) as a Wake."""
    if payload == "*":
        return EVERYTHING
    try:
        data = loads(payload)
        wake = Wake(
            frozenset(int(p) for p in data.get("p") or ()),
            frozenset(Lane(lane) for lane in data.get("l") or ()),
            bool(data.get("s")),
        )
    except (ValueError, TypeError, AttributeError):
        logger.warning("unreadable wake-up payload %r: waking everything", payload)
        return EVERYTHING
    events = data.get("e")
    if not events:
        return wake
    try:
        jobs = hint_jobs(events)
    except (ValueError, TypeError, AttributeError, KeyError):
        logger.warning("unreadable event in wake-up payload %r: a plain wake-up", payload)
        return wake
    return Wake(wake.partitions, wake.lanes, wake.schedules, jobs)


class Listener:
    def __init__(self, dsn: str, channel: str, feed: LocalFeed, *, retry_s: float = 1.0) -> None:
        self.dsn = dsn
        self.channel = channel
        self.feed = feed
        self.retry_s = retry_s
        self.conn: psycopg.AsyncConnection[object] | None = None
        self.reconnects = 0
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    @property
    def backend_pid(self) -> int | None:
        """The server process of the LISTEN connection (tests terminate it)."""
        return self.conn.info.backend_pid if self.conn is not None else None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        """Return once LISTEN is in place (or the first attempt failed: then it retries
        and publishes `EVERYTHING` when back). Idempotent."""
        if not self.running:
            self._ready = asyncio.Event()
            self._task = asyncio.create_task(self._run(), name=f"listen {self.channel}")
        await self._ready.wait()

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        self._ready.set()  # a start() still waiting (the store closing) returns
        await self._drop()

    async def _connect(self) -> None:
        conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
        await conn.execute(f'LISTEN "{self.channel}"')
        self.conn = conn

    async def _drop(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def _run(self) -> None:
        missed = False
        while True:
            try:
                await self._connect()
                if missed:
                    self.reconnects += 1
                    self.feed.publish(EVERYTHING)  # what was sent while we were away is lost
                missed = False
                self._ready.set()
                assert self.conn is not None
                async for note in self.conn.notifies():
                    self.feed.publish(parse_wake(note.payload))
                raise psycopg.OperationalError("notification stream ended")
            except psycopg.Error as exc:
                logger.warning("change feed connection lost (%s); reconnecting", exc)
                missed = True
                await self._drop()
                self._ready.set()  # open() must not hang on a server that is down
                await asyncio.sleep(self.retry_s)
