"""The memory store's write path: a transaction stages its changes and applies them on
commit under the same compare-and-set rules as the real adapters."""

from __future__ import annotations

import asyncio
import operator
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, fields
from typing import Any

from jobledger.domain.events import Event
from jobledger.domain.jobs import Change, Job
from jobledger.storage.feed import LocalFeed, wake_of
from jobledger.storage.memory.tables import MemoryTables
from jobledger.storage.port import LeaseGuard, Transaction, Writes, native_handle, run_after_commit


@dataclass
class MemoryTx:
    """The native handle of a memory transaction: staged changes until commit."""

    writes: MemoryWrites
    staged: list[Change] = field(default_factory=list)
    business: dict[str, list[Any]] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)  # `next_version`, until commit
    held: list[asyncio.Lock] = field(default_factory=list)  # the counters' locks it holds
    done: bool = False

    def end(self) -> None:
        """Finished (committed or rolled back): its counters' locks go."""
        self.done = True
        for lock in self.held:
            lock.release()
        self.held.clear()

    def insert(self, table: str, row: Any) -> None:
        """Business code's own write (tests use it as "the business row")."""
        self.business.setdefault(table, []).append(row)


class MemoryWrites(Writes):
    def __init__(self, tables: MemoryTables, feed: LocalFeed) -> None:
        self.tables = tables
        self.wakes = feed  # where its commits' wake-ups go

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        tx = Transaction(MemoryTx(self))
        try:
            yield tx
        except BaseException:
            tx.native.end()
            raise
        self.commit(tx.native)
        run_after_commit(tx)

    def commit(self, native: MemoryTx) -> None:
        if native.done:
            raise RuntimeError("transaction already finished")
        tables = self.tables
        tables.counters.update(native.counters)
        native.end()
        applied = [
            change
            for change, ok in zip(native.staged, self._apply_all(native.staged), strict=True)
            if ok
        ]
        for table, rows in native.business.items():
            tables.business.setdefault(table, []).extend(rows)
        self.publish(applied)

    async def append_in(self, tx: Any, changes: Sequence[Change]) -> list[bool]:
        native = self._own(tx)
        staged_keys = {c.dedupe_key for c in native.staged if c.dedupe_key}
        dedupe = self.tables.dedupe
        flags = []
        for change in changes:
            seen = change.dedupe_key in dedupe or change.dedupe_key in staged_keys
            if not seen:
                native.staged.append(change)
                if change.dedupe_key:
                    staged_keys.add(change.dedupe_key)
            flags.append(not seen)
        return flags

    async def next_version(self, tx: Any, key: str) -> int:
        native = self._own(tx)
        if native.done:
            raise TypeError("the memory store takes a MemoryTx of its own, still open")
        if key not in native.counters:  # first ask in this transaction: take the key's lock
            lock = self.tables.counter_locks.setdefault(key, asyncio.Lock())
            await lock.acquire()
            native.held.append(lock)
            native.counters[key] = self.tables.counters.get(key, 0)
        native.counters[key] += 1
        return native.counters[key]

    def _own(self, tx: Any) -> MemoryTx:
        native = native_handle(tx)
        if not isinstance(native, MemoryTx) or native.writes is not self:
            raise TypeError("the memory store takes a MemoryTx from its own transaction()")
        return native

    async def dedupe_holders(self, tx: Any, keys: Sequence[str]) -> dict[str, str]:
        staged = {c.dedupe_key: c.stream for c in native_handle(tx).staged if c.dedupe_key}
        dedupe = self.tables.dedupe
        held = {k: s for k in keys if (s := dedupe.get(k) or staged.get(k))}
        return {k: s.removeprefix("job:") for k, s in held.items()}

    async def apply(
        self, changes: Sequence[Change], *, guard: LeaseGuard | None = None
    ) -> list[bool]:
        allowed = None
        if guard is not None:
            holds = self.tables.holds
            allowed = [
                change.partition is None or holds(guard, change.partition) for change in changes
            ]
        flags = self._apply_all(changes, allowed)
        self.publish([c for c, ok in zip(changes, flags, strict=True) if ok])
        return flags

    def _apply_all(
        self, changes: Sequence[Change], allowed: Sequence[bool] | None = None
    ) -> list[bool]:
        flags = []
        versions = self.tables.versions
        for i, change in enumerate(changes):
            # the compare-and-set first: a stale change costs one lookup
            ok = (
                versions.get(change.stream, 0) == change.expected_version
                and (allowed is None or allowed[i])
                and self._applicable(change)
            )
            if ok:
                self._apply_one(change)
            flags.append(ok)
        return flags

    def _applicable(self, change: Change) -> bool:
        """The rest of the checks once the stream's version matched."""
        tables = self.tables
        if (
            change.expected_version == 0
            and change.dedupe_key
            and change.dedupe_key in tables.dedupe
        ):
            return False
        row = change.row
        code = row.exclusive_code if isinstance(row, Job) else None
        return not code or all(
            o.id == row.id or o.exclusive_code != code for o in tables.jobs.values()
        )

    def _apply_one(self, change: Change) -> None:
        tables = self.tables
        events = change.events
        if events:
            log = tables.events
            position = tables.last_position
            for event in events:
                position += 1
                log.append(_positioned(event, position))
            tables.last_position = position
            tables.versions[change.stream] = events[-1].version
        else:
            tables.versions[change.stream] = change.expected_version
        if change.expected_version == 0 and change.dedupe_key:
            tables.dedupe[change.dedupe_key] = change.stream
        kind, _, ident = change.stream.partition(":")
        if kind == "job":
            tables.put_job(ident, change.row)
        elif change.row is None:
            tables.schedules.pop(ident, None)
        else:
            tables.schedules[ident] = change.row

    def publish(self, applied: Sequence[Change]) -> None:
        wake = wake_of(applied)
        if wake is not None:
            self.wakes.publish(wake)


#: every field of an event but its position (the last), in order: a copy without
#: `replace`'s per-call field introspection (one event per change on the lanes' path)
_EVENT_FIELDS = tuple(f.name for f in fields(Event))
assert _EVENT_FIELDS[-1] == "position"
_EVENT_VALUES = operator.attrgetter(*_EVENT_FIELDS[:-1])
_EVENT_FROM_VALUES: Callable[..., Event] = Event


def _positioned(event: Event, position: int) -> Event:
    return _EVENT_FROM_VALUES(*_EVENT_VALUES(event), position)
