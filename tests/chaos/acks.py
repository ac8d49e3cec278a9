"""Why a succeeded job is not on its topic: the workers' own acknowledgement log decides.

Each chaos worker logs every record the broker acknowledged (tests/chaos/app.py,
CHAOS_ACKS: job id, topic, partition, offset) before the handler returns, so before the
job's `JobSucceeded` can be committed. For a job that succeeded but whose record the
recorder never read, `classify_lost` names the cause from that log and the records read:

* `no ack` — no acknowledgement was logged for the job: the engine recorded a success
  without the broker's acknowledgement of that job's record. An engine defect; never
  excused.
* `acked, overwritten` — every acknowledged offset was read, in every broker generation,
  holding another record: the broker gave the record's offset to another record (an
  acknowledged record lost by the broker).
* `acked, not read` — an acknowledged offset the recorder never read in some generation:
  the broker acknowledged it, the harness did not see it before the broker (memory
  storage) forgot it, or the recorder stopped short of it.

`unread()` applies the same log to every record, lost job or not: each acknowledged
record must have been read at its acknowledged offset (in some broker generation). One
that was not is a hole in the observation — an at-least-once job may have been read
elsewhere (a resend), but an unread record could as well hide an at-most-once
duplicate — so it fails the run too.

Every cause still fails the run (the harness fails closed); the cause only says where
to look. The generation of an acknowledgement is not logged (a worker cannot know which
broker life answered), so every generation is considered.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.chaos.record import Delivered

NO_ACK = "no ack (engine defect)"
OVERWRITTEN = "acked, overwritten (broker)"
NOT_READ = "acked, not read (broker or harness)"


@dataclass(frozen=True)
class Ack:
    job: str
    topic: str
    partition: int
    offset: int
    at: float = 0.0
    pid: int = 0


def load_acks(path: Path) -> list[Ack]:
    """The ack log's lines (a torn last line from a SIGKILLed worker is skipped)."""
    if not path.exists():
        return []
    out: list[Ack] = []
    for line in path.read_text().splitlines():
        try:
            raw: dict[str, Any] = json.loads(line)
        except ValueError:
            continue
        out.append(Ack(**raw))
    return out


class AckIndex:
    """The acks by job, and what the recorder read at each (generation, topic,
    partition, offset)."""

    def __init__(self, acks: Iterable[Ack], records: Iterable[Delivered]) -> None:
        self.by_job: dict[str, list[Ack]] = {}
        for ack in acks:
            self.by_job.setdefault(ack.job, []).append(ack)
        self.held: dict[tuple[int, str, int, int], str | None] = {}
        self.generations: set[int] = {0}
        for r in records:
            self.held[(r.generation, r.topic, r.partition, r.offset)] = r.event_id
            self.generations.add(r.generation)

    def unread(self) -> list[Ack]:
        """Acknowledged records the recorder did not read at their offset."""
        return [
            ack
            for acks in self.by_job.values()
            for ack in acks
            if not any(
                self.held.get((gen, ack.topic, ack.partition, ack.offset)) == ack.job
                for gen in self.generations
            )
        ]

    def classify_lost(self, job_id: str) -> tuple[str, str]:
        """(cause, detail) for a succeeded job none of whose records was read."""
        acks = self.by_job.get(job_id, [])
        if not acks:
            return NO_ACK, "no acknowledgement logged for it by any worker"
        unread: list[str] = []
        others: list[str] = []
        for ack in acks:
            where = f"{ack.topic}/{ack.partition}@{ack.offset}"
            for gen in sorted(self.generations):
                holder = self.held.get((gen, ack.topic, ack.partition, ack.offset), "")
                if holder == "":
                    unread.append(f"{where} (generation {gen}: not read)")
                else:
                    others.append(f"{where} (generation {gen}: {holder})")
        if unread:
            return NOT_READ, "acknowledged at " + ", ".join(unread)
        return OVERWRITTEN, "acknowledged, and read holding other records: " + ", ".join(others)
