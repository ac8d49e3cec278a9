"""Group commit: changes from every partition worker share one `store.apply`.

Whatever is submitted while a commit is running goes into the next one, so a pod with
64 busy partitions writes the outcomes of all of them, and the next round of in-flight
marks, in a handful of transactions instead of hundreds ("Throughput without losing the
guarantees"). Marks are lease-guarded; outcomes are not (a late outcome is still a
compare-and-set on the row, reference §9): a call holding marks is applied under the
guard, and any unguarded change the guard refused is applied once more without it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

from jobledger.clock import Clock
from jobledger.domain.jobs import Change
from jobledger.storage.port import LeaseGuard, Store


@dataclass(slots=True)
class _Item:
    change: Change
    guarded: bool
    future: asyncio.Future[bool]


class GroupCommitter:
    def __init__(self, store: Store, clock: Clock, pod: str) -> None:
        self._store = store
        self._clock = clock
        self._pod = pod
        self._pending: list[_Item] = []
        self._writer: asyncio.Task[None] | None = None
        self.commits = 0  # transactions written (for the benches)

    async def commit(self, changes: Sequence[Change], guarded: Sequence[bool]) -> list[bool]:
        """Apply `changes` (lease-guarded where `guarded`); which were applied."""
        if not changes:
            return []
        loop = asyncio.get_running_loop()
        items = [_Item(c, g, loop.create_future()) for c, g in zip(changes, guarded, strict=True)]
        self._pending.extend(items)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_all(), name="jobledger-commit")
        return [await item.future for item in items]

    async def close(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):
                await self._writer

    async def _write_all(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                flags = await self._write(batch)
            except Exception as exc:
                for item in batch:
                    if not item.future.done():
                        item.future.set_exception(exc)
                continue
            for item, ok in zip(batch, flags, strict=True):
                if not item.future.done():
                    item.future.set_result(ok)

    async def _write(self, batch: list[_Item]) -> list[bool]:
        changes = [item.change for item in batch]
        if not any(item.guarded for item in batch):
            self.commits += 1
            return await self._store.apply(changes)
        guard = LeaseGuard(self._pod, self._clock.now())
        self.commits += 1
        flags = await self._store.apply(changes, guard=guard)
        retry = [i for i, (item, ok) in enumerate(zip(batch, flags, strict=True))
                 if not ok and not item.guarded]
        if retry:
            self.commits += 1
            again = await self._store.apply([changes[i] for i in retry])
            for i, ok in zip(retry, again, strict=True):
                flags[i] = ok
        return flags
