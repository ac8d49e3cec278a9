"""Replay streamed: each stream folded whole, compared with its live row, and dropped.

The log is read in (stream, version) order (`LogReads.read_log_by_stream`, the unique
index), so a stream's events come together, in its chain's order. A job stream is
folded with `domain.jobs.apply_state` (the transitions of `apply`, on one mutable dict:
a `Job` is built once per stream, at its end) and compared with its live row at once:
job streams (`job:<id>`) come in id order, so the live jobs are read alongside by id
(`AdminReads.list_jobs`' keyset paging, oldest id first) and the two are merged, a live row
that no stream explains reported as it is passed. What is held is a page of events (and
the one read ahead), a page of live rows (and the one read ahead) and the stream being
folded, whatever the size of the log. Schedules (a handful, their table is read whole
anyway) are folded by `SchedulesFold` as before.

A store without that read (`read_log_by_stream` returns None: the memory store,
MongoDB) has its log read in position order and sorted in memory first.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import TypeVar

from jobledger.domain.events import Event
from jobledger.domain.jobs import Job, JobState, apply_state
from jobledger.projections.differences import EXTRA, Difference, compare_rows, differences
from jobledger.projections.jobs import JOB_PREFIX, where_in_log
from jobledger.projections.log import DEFAULT_PAGE, OnPage, collector_paused, pages
from jobledger.projections.schedules import ScheduleApply, SchedulesFold
from jobledger.storage.port import JobFilter, Store

K = TypeVar("K")
T = TypeVar("T")

#: where a stream-ordered read starts: before every (stream, version)
FIRST = ("", 0)


async def _read_ahead(
    fetch: Callable[[K], Awaitable[list[T]]], key_of: Callable[[T], K], start: K, first: list[T]
) -> AsyncGenerator[list[T]]:
    """`first`, then `fetch(key of the last item)` until a page is empty, the next page
    read while the caller works on this one. Each page must start after the last."""
    after, items = start, first
    while items:
        last = key_of(items[-1])
        if not after < last:  # type: ignore[operator]  # keys are str or (str, int)
            raise RuntimeError(f"a page read after {after!r} ends at {last!r}: no progress")
        after = last
        ahead = asyncio.ensure_future(fetch(last))
        try:
            await _started()
            yield items
        except BaseException:  # the reader stopped early (or failed): drop the read ahead
            ahead.cancel()
            if ahead.done() and not ahead.cancelled():
                ahead.exception()
            raise
        items = await ahead


async def _started() -> None:
    """Give the loop two turns, so that a read just scheduled starts (checks out its
    connection, sends its query, hands its work to the reader thread) before the caller
    folds a page: else it would start only when the caller next waits, and nothing would
    overlap (1M events on PostgreSQL at load ≈ 4: 5.8 to 6.0 s of waiting, then 3.9 to 4.3 s)."""
    await asyncio.sleep(0)
    await asyncio.sleep(0)


async def stream_pages(store: Store, *, page: int = DEFAULT_PAGE) -> AsyncIterator[list[Event]]:
    """The whole log in (stream, version) order, `page` events at a time."""
    if page < 1:
        raise ValueError("page must be at least 1")

    async def fetch(after: tuple[str, int]) -> list[Event]:
        return await store.log.read_log_by_stream(after, limit=page) or []

    first = await store.log.read_log_by_stream(FIRST, limit=page)
    if first is None:  # no such read: the log sorted in memory
        events = [event async for events in pages(store, page=page) for event in events]
        events.sort(key=_place)
        for start in range(0, len(events), page):
            yield events[start : start + page]
        return
    async for events in _read_ahead(fetch, _place, FIRST, first):
        yield events


def _place(event: Event) -> tuple[str, int]:
    return (event.stream, event.version)


def _job_id(job: Job) -> str:
    return job.id


class LiveJobs:
    """The live jobs in id order, a page at a time (one read ahead); `take(id)` passes
    the rows before `id` (each an EXTRA difference) and returns the row `id`, if any."""

    def __init__(self, store: Store, page: int, out: list[Difference]) -> None:
        self.store, self.page, self.out = store, page, out
        self.rows: list[Job] = []
        self.index = 0
        self._pages: AsyncGenerator[list[Job]] | None = None

    async def _fetch(self, after: str) -> list[Job]:
        found, _ = await self.store.admin.list_jobs(
            JobFilter(), offset=0, limit=self.page, after=after, count_limit=0
        )
        return found

    async def _next_page(self) -> bool:
        if self._pages is None:
            self._pages = _read_ahead(self._fetch, _job_id, "", await self._fetch(""))
        self.rows = await anext(self._pages, [])
        self.index = 0
        return bool(self.rows)

    async def take(self, job_id: str | None) -> Job | None:
        """None: pass every row left."""
        while True:
            rows, index = self.rows, self.index
            while index < len(rows) and (job_id is None or rows[index].id < job_id):
                self.out.append(Difference("jobs", rows[index].id, EXTRA, live=rows[index]))
                index += 1
            self.index = index
            if index < len(rows):
                if rows[index].id != job_id:
                    return None
                self.index = index + 1
                return rows[index]
            if not await self._next_page():
                return None

    async def close(self) -> None:
        if self._pages is not None:
            await self._pages.aclose()


class StreamedReplay:
    """One pass over the log in stream order; `differences` and `problems` after `run`."""

    def __init__(self, store: Store, *, page: int, schedule_fold: ScheduleApply | None) -> None:
        self.store, self.page = store, page
        self.events = 0
        self.position = 0
        self.jobs_rebuilt = 0
        self.other_streams = 0  # events of streams neither fold knows
        self.schedules = SchedulesFold(schedule_fold)
        self.differences: list[Difference] = []
        self._problems: list[tuple[int, str]] = []  # (position, text): the job streams'
        self.live = LiveJobs(store, page, self.differences)
        # where the read is: the last (stream, version), the job being folded and its state
        self._last: tuple[str, int] = FIRST
        self._job: str | None = None
        self._state: JobState | None = None

    @property
    def problems(self) -> list[str]:
        """Events the folds rejected: the job streams' in log position order, then the
        schedule streams'."""
        ordered = sorted(self._problems, key=lambda p: p[0])
        return [text for _, text in ordered] + self.schedules.problems

    async def run(self, on_page: OnPage | None = None) -> None:
        # the cyclic collector paused: pages of events outlive a few young collections
        # and would be promoted, then walked again by full collections (the reads make
        # no garbage cycles: nothing accumulates; tests/unit/test_replay_memory.py)
        try:
            with collector_paused():
                async for events in stream_pages(self.store, page=self.page):
                    for job_id, row in self._feed(events):
                        await self._compare(job_id, row)
                    if on_page is not None:
                        on_page(len(events))
                if self._job is not None:
                    await self._compare(self._job, self._row(self._state))
                await self.live.take(None)  # the live rows after the last job stream
        finally:
            await self.live.close()
        if self.schedules.available:
            live = {s.code: s for s in await self.store.admin.list_schedules()}
            self.differences += compare_rows("schedules", live, self.schedules.rows)

    async def _compare(self, job_id: str, row: Job | None) -> None:
        live = await self.live.take(job_id)
        if live is not None or row is not None:
            self.differences += differences("jobs", job_id, live, row)

    def _row(self, state: JobState | None) -> Job | None:
        if state is None:
            return None
        self.jobs_rebuilt += 1
        return Job(**state)

    def _feed(self, events: list[Event]) -> list[tuple[str, Job | None]]:
        """Fold a page; the job streams it ended (id, row or None), in id order."""
        ended: list[tuple[str, Job | None]] = []
        schedules, problems = self.schedules, self._problems
        last_stream, last_version = self._last
        job, state = self._job, self._state
        position = self.position
        for event in events:
            stream, version = event.stream, event.version
            if stream != last_stream:
                if not last_stream < stream:
                    raise RuntimeError(f"{self.store.name}: {stream} read after {last_stream}")
                if job is not None:
                    ended.append((job, self._row(state)))
                job = stream[len(JOB_PREFIX) :] if stream.startswith(JOB_PREFIX) else None
                state = None
                last_stream = stream
            elif not last_version < version:
                raise RuntimeError(f"{self.store.name}: {stream} v{version} after v{last_version}")
            last_version = version
            if event.position is not None and event.position > position:
                position = event.position
            if job is not None:
                try:
                    state = apply_state(state, event)
                except (ValueError, KeyError) as exc:
                    problems.append(
                        (event.position or 0, f"{where_in_log(event)}: cannot fold: {exc}")
                    )
                    continue
                if state is not None and state["id"] != job:
                    text = f"{where_in_log(event)}: row id {state['id']} does not match the stream"
                    problems.append((event.position or 0, text))
            elif schedules.handles(event):
                schedules.feed(event)
            else:
                self.other_streams += 1
        self._last = (last_stream, last_version)
        self._job, self._state = job, state
        self.events += len(events)
        self.position = position
        return ended


async def replay_streams(
    store: Store,
    *,
    page: int = DEFAULT_PAGE,
    schedule_fold: ScheduleApply | None = None,
    on_page: OnPage | None = None,
) -> StreamedReplay:
    """Fold the whole log stream by stream and compare it with the live read models."""
    result = StreamedReplay(store, page=page, schedule_fold=schedule_fold)
    await result.run(on_page)
    return result
