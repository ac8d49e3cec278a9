"""How far the demo's jobs got, read from the store's log — not counted in this process,
so a job settled by another worker on the same store counts, and a run that this
process saw fail but never wrote does not.

    tally = await Tally.start(store, job_ids)     # tail the log from the first job on
    settled = await follow(tally, out, stop)      # a bar on a terminal; False if stopped
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TextIO

from jobledger.cli.progress import Progress
from jobledger.domain.events import EventType
from jobledger.domain.jobs import job_stream
from jobledger.storage.port import Store

PAGE = 1000
POLL_S = 0.2


@dataclass
class Tally:
    """The outcomes of `job_ids` so far, from the log after `position`."""

    store: Store
    streams: frozenset[str]  # the jobs' streams (job:<id>)
    position: int
    ok: int = 0
    dead: int = 0
    failed: int = 0  # answered failures, retried later
    settled_ids: set[str] = field(default_factory=set)

    @classmethod
    async def start(cls, store: Store, job_ids: Sequence[str]) -> Tally:
        """Tail the log from just before the first job's first event (`job_ids` in
        enqueue order, so every event of theirs comes after it)."""
        streams = [job_stream(job_id) for job_id in job_ids]
        position = 0
        if streams:
            events = await store.log.read_stream(streams[0])
            positions = [e.position for e in events if e.position is not None]
            position = min(positions) - 1 if positions else 0
        return cls(store, frozenset(streams), max(position, 0))

    @property
    def total(self) -> int:
        return len(self.streams)

    @property
    def settled(self) -> int:
        return len(self.settled_ids)

    async def poll(self) -> None:
        """Fold the events written since the last poll."""
        while True:
            events = await self.store.log.read_log(self.position, limit=PAGE)
            for event in events:
                if event.position is not None:
                    self.position = max(self.position, event.position)
                if event.stream not in self.streams:
                    continue
                if event.type == EventType.JOB_SUCCEEDED:
                    self.ok += 1
                    self.settled_ids.add(event.stream)
                elif event.type == EventType.JOB_DEAD:
                    self.dead += 1
                    self.settled_ids.add(event.stream)
                elif event.type == EventType.JOB_FAILED:
                    self.failed += 1
            if len(events) < PAGE:
                return

    def note(self) -> str:
        return f"{self.ok} ok · {self.failed} failed runs (retrying) · {self.dead} dead"


async def follow(tally: Tally, out: TextIO, stop: asyncio.Event) -> bool:
    """Poll until every job settled (True) or `stop` is set first (False); a bar on a
    terminal, nothing when piped (the caller prints the summary)."""
    with Progress("demo", total=tally.total, unit="jobs settled", stream=out) as progress:
        while True:
            await tally.poll()
            progress.note = tally.note()
            progress.update(tally.settled)
            if tally.settled >= tally.total:
                return True
            if stop.is_set():
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), POLL_S)
