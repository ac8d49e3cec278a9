"""The engine facade business code talks to: register targets, enqueue in your transaction.

engine = Engine(SqliteStore("jobs.db"))
engine.targets.register("mail:welcome", "long", send_welcome, delivery_mode="at_least_once")
async with engine.transaction() as tx:
    tx.native.execute("INSERT INTO users ...")          # your own write
    await engine.enqueue("mail:welcome", {"user": 7}, key="user:7", tx=tx)
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypedDict, Unpack

from jobledger.config.settings import Settings
from jobledger.core import context
from jobledger.core.clock import Clock, SystemClock
from jobledger.core.handlers import PayloadType
from jobledger.core.ids import new_id
from jobledger.core.registry import RunLimits, TargetRegistry
from jobledger.domain import job_commands
from jobledger.domain.enqueue_rules import check_counter_key, check_new_job, resolve_run_at
from jobledger.domain.errors import InvalidArgument
from jobledger.domain.jobs import Change, Lane, NewJob, Stamp
from jobledger.domain.policies import partition_of
from jobledger.domain.records import fast_init
from jobledger.observability.observe import Observers
from jobledger.observability.tracing import enqueue_traceparent, tracing_of
from jobledger.storage.port import Store, Transaction

logger = logging.getLogger("jobledger.enqueue")


@fast_init
@dataclass(frozen=True, slots=True)
class Enqueued:
    """What `enqueue` did with one item.

    `inserted` True: `job_id` is the new job. False on a dedupe hit: `job_id` is the job
    that already holds the dedupe key (enqueued earlier, in this transaction or this
    call, even one that has finished), so the caller can follow it. `job_id` is None
    for a lossy item (nothing is stored)."""

    job_id: str | None
    inserted: bool
    lossy: bool = False


_NOT_ENQUEUED = Enqueued(None, False)


class EnqueueOptions(TypedDict, total=False):
    """The options of one enqueue, by name (`Engine.new_job`): what the sync, SQLAlchemy
    and Django helpers take as keywords, so a type checker catches a misspelt one."""

    key: str | None
    version: int
    dedupe_key: str | None
    run_at: datetime | timedelta | None
    headers: Mapping[str, str] | None
    code: str | None


@dataclass(slots=True)
class EnqueuePlan:
    """What `Engine.plan_enqueue` made of a call's items: the changes to write (and the
    item each belongs to), the items that repeat an earlier item's dedupe key, and the
    results known before any write (lossy items)."""

    results: list[Enqueued | None]
    changes: list[Change] = field(default_factory=list)
    slots: list[int] = field(default_factory=list)
    repeats: list[tuple[int, int]] = field(default_factory=list)  # (item, earlier item)

    def lost_keys(self, flags: Sequence[bool]) -> list[str]:
        """The dedupe keys of the changes the store did not write."""
        return [
            c.dedupe_key
            for c, ok in zip(self.changes, flags, strict=True)
            if not ok and c.dedupe_key
        ]


class Engine:
    def __init__(
        self,
        store: Store,
        *,
        targets: TargetRegistry | None = None,
        clock: Clock | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.store = store
        self.settings = settings or Settings()
        self.clock: Clock = clock or SystemClock()
        self.targets = targets or TargetRegistry(self.settings.max_attempts)
        for code, attempts in self.settings.max_attempts_by_code.items():
            self.targets.set_max_attempts(code, attempts)
        # targets' timeouts run on this clock and must fit these leases
        self.targets.bind(
            RunLimits(self.clock, self.settings.partition_lease_s, self.settings.long_lease_s)
        )
        #: called with the NewJob of each lossy item after its transaction commits
        self.lossy_handoff: Any = None
        #: run lines, alerts, metrics and traces hang off this fan-out
        self.observers = Observers()
        #: typed payloads by target (`App.target(payload=...)`): validated at enqueue
        self.payload_types: dict[str, PayloadType] = {}

    def transaction(self) -> AbstractAsyncContextManager[Transaction]:
        return self.store.writes.transaction()

    async def enqueue(
        self, target: str, payload: Any = None, *, tx: Any, **options: Unpack[EnqueueOptions]
    ) -> Enqueued:
        """`enqueue_many` of one item (options as `new_job`)."""
        return (await self.enqueue_many([self.new_job(target, payload, **options)], tx=tx))[0]

    def new_job(
        self,
        target: str,
        payload: Any = None,
        *,
        key: str | None = None,
        version: int = 0,
        dedupe_key: str | None = None,
        run_at: datetime | timedelta | None = None,
        headers: Mapping[str, str] | None = None,
        code: str | None = None,
    ) -> NewJob:
        """The item an enqueue of these options writes: `key` orders a target's jobs on
        the fast lane (by `version`, then enqueue order); `dedupe_key` makes it idempotent;
        `run_at` is an aware datetime or a `timedelta` from now (the engine's clock);
        `headers` go with the job (Kafka record headers); `code` names the job (the
        target by default: per-code max attempts, exclusive codes)."""
        if run_at is not None:
            run_at = resolve_run_at(run_at, self.clock.now())
        return NewJob(target, payload, code, key, version, dedupe_key, headers, run_at)

    async def enqueue_many(self, items: Sequence[NewJob], *, tx: Any) -> list[Enqueued]:
        """Append one JobEnqueued per item inside the caller's transaction `tx`.

        Everything is validated before anything is written. A dedupe key seen before
        (earlier in this call, or in the log) inserts nothing and raises nothing; its
        result carries the id of the job that holds the key (`inserted` False).
        Lossy targets write nothing here: they are handed over after the commit.
        """
        plan = self.plan_enqueue(items, tx=tx)
        flags: list[bool] = []
        holders: dict[str, str] = {}
        if plan.changes:
            flags = await self.store.writes.append_in(tx, plan.changes)
            lost = plan.lost_keys(flags) if not all(flags) else []
            if lost:
                holders = await self.store.writes.dedupe_holders(tx, lost)
        return self.settle_enqueue(plan, flags, holders, tx=tx)

    async def next_version(self, key: str, *, tx: Any) -> int:
        """The next version of `key`, counted in the caller's transaction `tx`
        (`Writes.next_version`): an enqueue's `version` that orders a key's jobs in commit
        order across processes (job ids order one process's rows, docs/decisions.md D21)."""
        check_counter_key(key)
        return await self.store.writes.next_version(tx, key)

    def plan_enqueue(self, items: Sequence[NewJob], *, tx: Any) -> EnqueuePlan:
        """Validate `items` and build their changes (no I/O): the first half of
        `enqueue_many`, shared with the sync path (jobledger.integrations.sync)."""
        ctx = context.current()
        stamp = self._stamp(ctx)
        tracing = tracing_of(self.observers)  # a producer span per job when tracing is on
        plan = EnqueuePlan([None] * len(items))
        lossy: list[tuple[int, NewJob]] = []
        first: dict[str, int] = {}  # dedupe key -> the item that has it first in this call
        at_ms = int(stamp.at.timestamp() * 1000)
        max_payload_bytes = self.settings.max_payload_bytes
        for index, item in enumerate(items):
            target = self.targets.get(item.target)
            if self.payload_types:
                typed = self.payload_types.get(item.target)
                if typed is not None:
                    item = dataclasses.replace(item, payload=typed.encode(item.payload))
            item = check_new_job(item, max_payload_bytes)
            if target.lossy:
                lossy.append((index, item))
                continue
            job_id = new_id(at_ms)
            dedupe = item.dedupe_key or job_id
            if dedupe in first:
                plan.repeats.append((index, first[dedupe]))
                continue
            first[dedupe] = index
            change = self.enqueued_change(
                item,
                job_id=job_id,
                stamp=stamp,
                traceparent=enqueue_traceparent(tracing, item.target, job_id, ctx.traceparent),
                lane=target.lane,
            )
            plan.changes.append(change)
            plan.slots.append(index)
        if lossy:
            self._hand_off_after_commit(tx, lossy, plan.results)
        return plan

    def settle_enqueue(
        self, plan: EnqueuePlan, flags: Sequence[bool], holders: dict[str, str], *, tx: Any
    ) -> list[Enqueued]:
        """The results of `plan` once the store wrote it (`flags`, per change) and named
        the `holders` of the dedupe keys that lost: the second half of `enqueue_many`."""
        results = plan.results
        written: list[Change] = []
        for index, change, ok in zip(plan.slots, plan.changes, flags, strict=True):
            if ok:
                results[index] = Enqueued(change.row.id, True)
                written.append(change)
            else:
                results[index] = Enqueued(holders.get(change.dedupe_key or ""), False)
        for index, earlier in plan.repeats:
            held = results[earlier]
            results[index] = Enqueued(held.job_id if held is not None else None, False)
        if written and self.observers.observers:
            self._report_enqueued(tx, written)
        return [r if r is not None else _NOT_ENQUEUED for r in results]

    def _report_enqueued(self, tx: Any, written: list[Change]) -> None:
        """`observers.enqueued` per target once the rows are committed (at once when
        the caller passed a native handle: the engine cannot see that commit)."""
        counts: dict[str, int] = {}
        for change in written:
            counts[change.row.target] = counts.get(change.row.target, 0) + 1

        def report() -> None:
            for target, count in counts.items():
                self.observers.enqueued(target, count)

        if isinstance(tx, Transaction):
            tx.after_commit(report)
        else:
            report()

    def enqueued_change(
        self,
        item: NewJob,
        *,
        job_id: str,
        stamp: Stamp,
        traceparent: str | None,
        lane: Lane | None = None,
    ) -> Change:
        """The JobEnqueued change for `item`: its target's lane (`lane`, when the caller
        looked the target up already), its code (the target by default), its partition
        from `key`, or from the dedupe key when there is none."""
        dedupe = item.dedupe_key or job_id
        return job_commands.enqueued(
            job_id=job_id,
            spec=item,
            code=item.code or item.target,
            lane=self.targets.get(item.target).lane if lane is None else lane,
            partition=partition_of(item.key, dedupe, self.settings.partitions),
            dedupe_key=dedupe,
            stamp=stamp,
            traceparent=traceparent,
        )

    def _stamp(self, ctx: context.RequestContext) -> Stamp:
        return Stamp(self.clock.now(), ctx.actor, ctx.trace_id or context.new_trace_id())

    def _hand_off_after_commit(
        self, tx: Any, items: list[tuple[int, NewJob]], results: list[Enqueued | None]
    ) -> None:
        if not isinstance(tx, Transaction):
            raise InvalidArgument(
                "lossy targets are handed over after the commit: open the transaction with"
                " engine.transaction() so the engine sees the commit"
            )
        for index, item in items:
            results[index] = Enqueued(None, False, lossy=True)
            tx.after_commit(functools.partial(self._lossy, item))

    def _lossy(self, item: NewJob) -> None:
        if self.lossy_handoff is None:
            logger.warning("lossy job for %s dropped: no lossy runner", item.target)
            return
        self.lossy_handoff(item)
        self.observers.enqueued(item.target, 1)
