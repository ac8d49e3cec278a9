"""The event log's archive and retention policy: the log cannot grow forever.

With `log_retention_days` set, a sweep finds job streams that have *left the queue*
(succeeded, skipped, cancelled or expired) and whose newest event is older than the
retention, appends all their events to a JSON Lines file (`archive-<date>.jsonl`, the
same lines `jobledger export` writes, flushed and fsynced), and only then removes them
from the log. Open jobs (PENDING, RUNNING, DEAD) and schedule streams are never
archived, so replay and verify keep working on what remains: every remaining stream is
whole. A job's dedupe key is forgotten with its stream: the dedupe window is the log's
retention.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from jobledger.core.clock import Clock, SystemClock
from jobledger.domain.events import Event
from jobledger.projections.periodic import Periodic
from jobledger.storage.port import Store

logger = logging.getLogger("jobledger.archive")

STREAMS_PER_ROUND = 500


@dataclass(frozen=True, slots=True)
class ArchiveResult:
    streams: int
    events: int
    file: Path | None


class LogArchive:
    def __init__(
        self,
        store: Store,
        directory: str | Path,
        *,
        retention_days: float | None,
        clock: Clock | None = None,
        interval_s: float = 3600.0,
    ) -> None:
        self.store = store
        self.directory = Path(directory)
        self.retention_days = retention_days
        self.clock: Clock = clock or SystemClock()
        self.periodic = Periodic("log-archive", self.run_once, self.clock, interval_s)

    async def start(self) -> None:
        if self.retention_days is not None:
            await self.periodic.start()

    async def stop(self) -> None:
        await self.periodic.stop()

    async def run_once(self, now: datetime | None = None) -> ArchiveResult:
        """Archive then remove every closed stream older than the retention."""
        if self.retention_days is None:
            return ArchiveResult(0, 0, None)
        now = now or self.clock.now()
        return await self.archive_before(now - timedelta(days=self.retention_days))

    async def archive_before(
        self, cutoff: datetime, *, on_round: Callable[[int], object] | None = None
    ) -> ArchiveResult:
        """`on_round(streams)`: called after each round with the streams it archived
        (the command's progress line)."""
        streams_done = events_done = 0
        target = self.directory / f"archive-{cutoff:%Y%m%dT%H%M%S}.jsonl"
        while True:
            streams = await self.store.retention.closed_streams(cutoff, limit=STREAMS_PER_ROUND)
            if not streams:
                break
            events: list[Event] = []
            for stream in streams:
                events.extend(await self.store.log.read_stream(stream))
            _append_durably(target, events)
            await self.store.retention.delete_streams(streams)
            streams_done += len(streams)
            events_done += len(events)
            if on_round is not None:
                on_round(len(streams))
        if streams_done:
            logger.info(
                "archived %d events of %d closed jobs to %s", events_done, streams_done, target
            )
        return ArchiveResult(streams_done, events_done, target if streams_done else None)


def _append_durably(path: Path, events: list[Event]) -> None:
    """Write the lines and fsync them before anything is deleted from the log."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as out:
        for event in events:
            out.write(event.json_line())
        out.flush()
        os.fsync(out.fileno())
