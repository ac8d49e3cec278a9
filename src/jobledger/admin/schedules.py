"""The admin's schedule commands: get, list, enable, disable, cron override.

Each command reads the row, asks `jobledger.domain.schedules.commands` (pure) for the change,
and applies it with a compare-and-set on the schedule stream; a lost race reads again
and rebuilds, up to CAS_RETRIES times. The scheduler's boot sync and slot records use
the same `_write`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from jobledger.core import context
from jobledger.core.clock import Clock
from jobledger.domain.errors import InvalidStatus, NotFound
from jobledger.domain.events import Actor
from jobledger.domain.jobs import Change, Stamp
from jobledger.domain.schedules import commands as sched
from jobledger.domain.schedules.row import Schedule
from jobledger.storage.port import Store

#: compare-and-set retries of one command before giving up (another writer keeps winning)
CAS_RETRIES = 10


class ScheduleCommands:
    """Schedule commands on `store`; a successful write sets `_wake` (the ticker re-reads)."""

    store: Store
    clock: Clock
    _wake: asyncio.Event

    async def get(self, code: str) -> Schedule:
        row = await self.store.admin.get_schedule(code)
        if row is None:
            raise NotFound(f"schedule {code!r} not found")
        return row

    async def list(self) -> Sequence[Schedule]:
        return await self.store.admin.list_schedules()

    async def enable(self, code: str, actor: Actor | None = None) -> Schedule:
        """disabled → enabled: next_run_at = next slot after now (missed slots dropped)."""
        return await self._write(code, lambda r, s: sched.enabled(r, s), actor)

    async def disable(self, code: str, actor: Actor | None = None) -> Schedule:
        """The tick ignores it; a slot already enqueued still runs."""
        return await self._write(code, lambda r, s: sched.disabled(r, s), actor)

    async def set_cron_override(self, code: str, cron: str, actor: Actor | None = None) -> Schedule:
        """InvalidCron for a bad cron; next_run_at follows the override."""
        return await self._write(code, lambda r, s: sched.override_set(r, cron, s), actor)

    async def clear_cron_override(self, code: str, actor: Actor | None = None) -> Schedule:
        return await self._write(code, lambda r, s: sched.override_cleared(r, s), actor)

    async def _write(
        self,
        code: str,
        build: Callable[..., Change | None],
        actor: Actor | None,
        *,
        missing_ok: bool = False,
    ) -> Schedule:
        """Read the row, build the change, apply it; on a lost compare-and-set read
        again and rebuild. NotFound for an unknown code (unless `missing_ok`)."""
        ctx = context.current()
        who = actor if actor is not None else ctx.actor
        trace = ctx.trace_id or context.new_trace_id()
        for _ in range(CAS_RETRIES):
            row = await self.store.admin.get_schedule(code)
            if row is None and not missing_ok:
                raise NotFound(f"schedule {code!r} not found")
            change = build(row, Stamp(self.clock.now(), who, trace))
            if change is None:
                assert row is not None
                return row
            if (await self.store.writes.apply([change]))[0]:
                self._wake.set()
                assert isinstance(change.row, Schedule)
                return change.row
        raise InvalidStatus(f"schedule {code!r}: concurrent writers kept winning, try again")
