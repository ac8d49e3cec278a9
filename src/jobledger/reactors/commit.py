"""Group commit: changes from every partition worker share one `store.writes.apply`.

Whatever is submitted while a commit is running goes into the next one, so a pod with
64 busy partitions writes the outcomes of all of them, and the next round of in-flight
marks, in a handful of transactions instead of hundreds. Marks are lease-guarded;
outcomes are not (a late outcome is still a compare-and-set on the row, so it cannot
overwrite a takeover's): a call holding marks is applied under the
guard, and any unguarded change the guard refused is applied once more without it.

A commit carries at most about `max_changes` changes (whole calls: a call is never
split across transactions). Without that cap a busy pod runs in waves: every worker
submits in the same loop turn, one commit takes everything, and the pod sits idle while
the database writes it (and the database idles while the pod runs the next rounds).
With it, the workers of the first commit run their next rounds while the next commit
is written: pod and database overlap. See docs/performance.md.

A store whose writes run in the pod's own process (SQLite: the writer thread shares the
GIL with the event loop) does better the other way round: a commit written while the
workers compute waits for the GIL at every step, so there the writer first *gathers*
(`gather_turns`): it lets the loop run, a turn at a time, until the workers its last
commit answered have submitted again (with at-most-once rows, each partition's outcome
and next mark), or the turns run out. One fuller commit then runs while the loop is
idle. Each partition still has at most one marked row: gathering only delays a commit.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

from jobledger.core.clock import Clock
from jobledger.domain.jobs import Change
from jobledger.storage.port import LeaseGuard, Store


@dataclass(slots=True)
class _Call:
    """One `commit` call waiting for the writer: its changes share one future."""

    changes: Sequence[Change]
    guarded: Sequence[bool]
    future: asyncio.Future[list[bool]]


#: changes one commit takes before it leaves the other calls to the next one
MAX_COMMIT_CHANGES = 1000


class GroupCommitter:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        pod: str,
        *,
        max_changes: int = MAX_COMMIT_CHANGES,
        gather_turns: int = 0,
    ) -> None:
        self._store = store
        self._clock = clock
        self._pod = pod
        self._max_changes = max_changes
        self._gather_turns = gather_turns
        self._pending: list[_Call] = []
        self._writer: asyncio.Task[None] | None = None
        self.commits = 0  # transactions written (for the benches)

    async def commit(self, changes: Sequence[Change], guarded: Sequence[bool]) -> list[bool]:
        """Apply `changes` (lease-guarded where `guarded`); which were applied."""
        if not changes:
            return []
        if len(changes) != len(guarded):
            raise ValueError("commit: one guarded flag per change")
        call = _Call(changes, guarded, asyncio.get_running_loop().create_future())
        self._pending.append(call)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_all(), name="jobledger-commit")
        return await call.future

    async def close(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):
                await self._writer

    async def _write_all(self) -> None:
        answered = 0  # the calls the last commit answered
        while True:
            if answered > 1 and self._gather_turns:
                await self._gather(len(self._pending) + answered)
            if not self._pending:
                return
            calls = self._take()
            answered = len(calls)
            changes = [change for call in calls for change in call.changes]
            guarded = [flag for call in calls for flag in call.guarded]
            try:
                flags = await self._write(changes, guarded)
            except Exception as exc:
                for call in calls:
                    if not call.future.done():
                        call.future.set_exception(exc)
                continue
            start = 0
            for call in calls:
                end = start + len(call.changes)
                if not call.future.done():
                    call.future.set_result(flags[start:end])
                start = end

    async def _gather(self, expected: int) -> None:
        """Let the event loop run, a turn at a time (at most `gather_turns`), until
        `expected` calls are pending (those pending now and the callers just answered,
        back with their next round) or a commit is full."""
        for _ in range(self._gather_turns):
            pending = self._pending
            if len(pending) >= expected or (
                sum(len(call.changes) for call in pending) >= self._max_changes
            ):
                return
            await asyncio.sleep(0)

    def _take(self) -> list[_Call]:
        """The calls of the next commit: the oldest first, whole calls, until they hold
        `max_changes` changes (always at least one call)."""
        pending = self._pending
        size = 0
        end = 0
        while end < len(pending) and (
            end == 0 or size + len(pending[end].changes) <= self._max_changes
        ):
            size += len(pending[end].changes)
            end += 1
        calls, self._pending = pending[:end], pending[end:]
        return calls

    async def _write(self, changes: list[Change], guarded: list[bool]) -> list[bool]:
        if not any(guarded):
            self.commits += 1
            return await self._store.writes.apply(changes)
        guard = LeaseGuard(self._pod, self._clock.now())
        self.commits += 1
        flags = await self._store.writes.apply(changes, guard=guard)
        retry = [
            i for i, (g, ok) in enumerate(zip(guarded, flags, strict=True)) if not ok and not g
        ]
        if retry:
            self.commits += 1
            again = await self._store.writes.apply([changes[i] for i in retry])
            for i, ok in zip(retry, again, strict=True):
                flags[i] = ok
        return flags
