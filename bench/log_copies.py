"""Copies of a slice of the log: a PostgreSQL log of 10M events in minutes, not an hour.

The benches fill a log with the contract tests' audit workload (`generate`: every kind
of job transition, ~4 events a job) through the store's own writes, ≈ 100k events per
slice of 25,000 jobs; 10M events that way take about an hour here. `Copier` reads one
slice written so and writes it again as new job streams, as often as asked:

* each copy is its own jobs: fresh job ids (time-ordered, made at the copy's times),
  its own numbers (payload `n`, version, dedupe key `audit:<n>`: the log's unique
  dedupe index stays unique), every time moved forward by the slice's span times the
  copy's number (the events' `at` and the times in their data), the events in the
  slice's order (streams interleaved as the workload wrote them);
* the hash chains are computed as the store's writes compute them
  (`domain.events.new_event`), so `jobledger verify` passes over the copies too;
* one copy is one transaction; it takes its positions as the store's COPY path does
  (`Statements.last_position`: this transaction's range, `xid << 20` plus an ordinal),
  so every later write sorts after it, and writes the events with the store's binary
  COPY (`Statements.copy_events`), into the same indexes the store's writes fill;
* with `rows=True` the jobs a copy leaves open (DEAD, RUNNING, PENDING: 3 in 8) get
  their read-model rows (folded from the copy's events, COPYed as `copy_jobs`), so a
  replay of the copies finds no difference; without, the read model has none of them,
  as `long_log.settle` leaves it.

Measured on the bench cluster: see bench/results/2026-12-07-long-log.md. Not a test.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

from jobledger.core.ids import new_id
from jobledger.domain import jobs
from jobledger.domain.events import GENESIS_HASH, Event, EventType, new_event
from jobledger.domain.jobs import Change, Job
from jobledger.domain.timeutil import iso, parse_iso
from jobledger.storage.postgres import PostgresStore
from jobledger.storage.postgres.encode import event_copy_row, job_copy_row

#: the times an event's data may carry (moved with the event's own time)
TIMES = ("next_run_at", "lease_until", "run_at")


def _moved(data: dict[str, Any], by: timedelta) -> dict[str, Any]:
    for name in TIMES:
        value = data.get(name)
        if isinstance(value, str):
            data[name] = iso(parse_iso(value) + by)
    return data


class Copier:
    """Copies of the events `template` (a slice of the log, in position order)."""

    def __init__(self, store: PostgresStore, template: list[Event]) -> None:
        self.store = store
        self.template = template
        self.jobs = sum(1 for e in template if e.type == EventType.JOB_ENQUEUED)
        self.numbers = [
            int(e.data["payload"]["n"]) for e in template if e.type == EventType.JOB_ENQUEUED
        ]
        first = min(e.at for e in template)
        # the next copy starts a minute after the slice ends
        self.span = max(e.at for e in template) - first + timedelta(minutes=1)
        self.first_number = min(self.numbers)
        self.jobs_span = max(self.numbers) - self.first_number + 1

    def events_of(self, k: int) -> list[Event]:
        """Copy `k` (1, 2, …) of the template: new streams, numbers, times and chains."""
        by = self.span * k
        offset = self.jobs_span * k
        streams: dict[str, str] = {}
        last: dict[str, str] = {}  # new stream -> its last hash
        out = []
        for event in self.template:
            data = dict(event.data)
            at: datetime = event.at + by
            if event.type == EventType.JOB_ENQUEUED:
                n = int(data["payload"]["n"]) + offset
                job_id = new_id(int(at.timestamp() * 1000))
                streams[event.stream] = jobs.job_stream(job_id)
                data.update(id=job_id, payload={"n": n}, version=n, dedupe_key=f"audit:{n}")
            stream = streams[event.stream]
            copied = new_event(
                stream,
                event.version,
                event.type,
                _moved(data, by),
                at=at,
                actor=event.actor,
                trace_id=event.trace_id,
                prev_hash=last.get(stream, GENESIS_HASH),
            )
            last[stream] = copied.hash
            out.append(copied)
        return out

    async def write(self, k: int, *, rows: bool = False) -> tuple[int, float]:
        """Write copy `k` in one transaction; (events written, seconds spent in Python
        building them)."""
        began = time.perf_counter()
        events = self.events_of(k)
        built = time.perf_counter() - began
        sql = self.store.sql
        pool = self.store.pool
        async with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            await cur.execute(sql.last_position, (len(events),))
            found = await cur.fetchone()
            assert found is not None
            async with cur.copy(sql.copy_events) as copy:
                copy.set_types(sql.copy_event_types)
                for position, event in enumerate(events, start=int(found[0]) + 1):
                    # a change of one event on an existing stream: the row the store's
                    # COPY writes for it (the dedupe key a JobEnqueued's data holds)
                    change = Change(event.stream, event.version, (event,), None)
                    await copy.write_row(event_copy_row(change, position))
            if rows:
                await self._rows(cur, events)
        return len(events), built

    async def _rows(self, cur: Any, events: list[Event]) -> None:
        """The read-model rows of the copy's open jobs (folded from its events)."""
        by_stream: dict[str, list[Event]] = {}
        for event in events:
            by_stream.setdefault(event.stream, []).append(event)
        open_rows = [j for j in (jobs.fold(evs) for evs in by_stream.values()) if j is not None]
        sql = self.store.sql
        async with cur.copy(sql.copy_jobs) as copy:
            copy.set_types(sql.copy_job_types)
            for job in open_rows:
                await copy.write_row(job_copy_row(_as_change(job)))


def _as_change(job: Job) -> Change:
    """A change carrying `job` as its row: what `encode.job_copy_row` reads."""
    return Change(jobs.job_stream(job.id), 0, (), job)
