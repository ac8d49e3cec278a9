"""`jobledger.App`: one object that declares an application — its store, settings,
targets and schedules — and that `jobledger worker --app`, `jobledger serve --app`,
scripts and tests all load the same way.

    app = jobledger.App(store="sqlite:///app.db")

    @app.target("mail:welcome", lane="long", delivery_mode="at_least_once")
    async def send_welcome(job): ...

    @app.schedule("nightly_report", "0 2 * * *")
    async def nightly(run): ...

    async with app:                           # open the store, start the workers
        async with app.transaction() as tx:
            await app.enqueue("mail:welcome", {"user": 7}, tx=tx)

    app.enqueue_sync("mail:welcome", {"user": 7}, tx=conn)   # sync code, its connection

    async with app.testing() as t:           # tests: memory store, FakeClock, same targets
        ...

Declarations are kept until the app starts (or `app.pod` is first used); then the pod
(store, engine, scheduler, lanes, HTTP: jobledger/pod.py) is built from them. The store
is the CLI's `--store` when given, else `App(store=...)`, else the settings'
(`JOBLEDGER_STORE`, the config file), else `sqlite:///jobledger.db`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, TypeVar, Unpack

from jobledger.admin.jobs import JobAdmin
from jobledger.config.settings import Settings
from jobledger.core.clock import Clock, FakeClock
from jobledger.core.handlers import PayloadType, no_handler, payload_type_of, typed_handler
from jobledger.core.registry import as_async, check_target_name, lane_and_mode
from jobledger.domain.errors import ConfigError
from jobledger.domain.jobs import JobStatus, NewJob
from jobledger.domain.run_policy import Backoff, RetryPolicy, check_timeout, retry_policy
from jobledger.engine import Enqueued, EnqueueOptions
from jobledger.pod import Pod, build
from jobledger.storage.port import Store
from jobledger.testing import Failures, Ran, TestRun, run_until_idle

__all__ = ["App", "Done", "Pod", "build"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclasses.dataclass(frozen=True, slots=True)
class Done:
    """How the jobs `App.wait_done` waited for ended: job id → SUCCEEDED, SKIPPED,
    CANCELLED, EXPIRED or DEAD (a DEAD job stays in the queue for an admin to retry)."""

    statuses: dict[str, str]

    @property
    def dead(self) -> list[str]:
        """The ids of the jobs that went DEAD."""
        return [job_id for job_id, status in self.statuses.items() if status == "DEAD"]

    @property
    def status(self) -> str:
        """The one job's final status (`wait_done` of a single job)."""
        if len(self.statuses) != 1:
            raise ValueError(f"{len(self.statuses)} jobs: read .statuses")
        return next(iter(self.statuses.values()))


@dataclasses.dataclass(frozen=True, slots=True)
class _Target:
    name: str
    lane: str
    handler: Callable[..., Any] | None
    delivery_mode: str
    exclusive: bool
    payload: type[Any] | None
    max_attempts: int | None
    retry: RetryPolicy | None = None
    timeout_s: float | None = None


class App:
    def __init__(
        self,
        store: str | Store | None = None,
        *,
        settings: Settings | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.store_arg = store
        self.settings = settings
        self.clock = clock
        self._targets: dict[str, _Target] = {}
        self._schedules: list[tuple[str, str, Callable[..., Any], dict[str, Any]]] = []
        self._on_build: list[Callable[[Pod], Any]] = []
        self._pod: Pod | None = None
        self._pending: list[Any] = []  # awaitables the build hooks returned
        self._testing = False  # inside `testing()`: its pod stands in for the app's

    # --- declaring ---------------------------------------------------------------------
    def target(
        self,
        name: str,
        *,
        lane: str = "long",
        delivery_mode: str = "at_most_once",
        exclusive: bool = False,
        payload: type[Any] | None = None,
        max_attempts: int | None = None,
        retry: Sequence[float | timedelta] | Backoff | None = None,
        timeout_s: float | None = None,
    ) -> Callable[[F], F]:
        """Register the decorated function as the handler of target `name`.

        `async def` handlers run on the event loop, plain `def` ones in a worker thread.
        With `payload` (a dataclass or pydantic model; also read from the handler's
        first parameter's annotation) the payload is validated at enqueue and the
        handler receives the rebuilt object (and the job, if it takes a second
        parameter); without it, the handler receives the `Job`.

        `retry`: the waits after its failed runs, a list of delays (seconds or
        timedeltas; `[5, 10]`: three runs, then DEAD) or a `jobledger.Backoff`; by default
        the `retry_delays_minutes` setting (1, 2, 4, 8, 16 minutes). `max_attempts` (or a
        per-code maximum) wins over the count the list implies.

        `timeout_s`: a run still going after that long is stopped and recorded as timed
        out (`RunTimedOut`): at-least-once, a failed attempt retried per `retry`;
        at-most-once, DEAD. An `async def` is cancelled; a plain `def` cannot be: its
        thread runs on to its end after the timeout is recorded, so its side effect may
        still happen, and at-least-once the retry may run alongside it. The timeout must
        be shorter than what is left of the lane's lease when a run starts (the
        `partition_lease_s` margin on the fast lane, `long_lease_s` on the long one):
        a longer one is refused when the app is built, before any job runs.
        """

        lane_and_mode(name, lane, delivery_mode)  # a typo fails here, naming the valid values
        policy = retry_policy(name, retry)  # so do bad retry and timeout values
        timeout = check_timeout(name, timeout_s)

        def decorate(fn: F) -> F:
            self._declare(
                _Target(
                    name,
                    lane,
                    fn,
                    delivery_mode,
                    exclusive,
                    payload or payload_type_of(fn),
                    max_attempts,
                    policy,
                    timeout,
                )
            )
            return fn

        return decorate

    def register(self, name: str, lane: str, handler: Callable[..., Any], **options: Any) -> None:
        """`app.target(name, lane=lane, **options)(handler)` without the decorator."""
        self.target(name, lane=lane, **options)(handler)

    def declare_target(
        self, name: str, *, lane: str = "long", payload: type[Any] | None = None
    ) -> None:
        """A target this process only enqueues to (its handler lives in the workers'
        code): a process with workers on refuses to start with it."""
        self._declare(_Target(name, lane, None, "at_most_once", False, payload, None))

    def schedule(self, code: str, cron: str, **options: Any) -> Callable[[F], F]:
        """Declare a cron schedule; options as `Scheduler.declare` (timezone, ...)."""

        def decorate(fn: F) -> F:
            self._unbound("declare a schedule")
            self._schedules.append((code, cron, as_async(fn), options))
            return fn

        return decorate

    def on_build(self, fn: Callable[[Pod], Any]) -> Callable[[Pod], Any]:
        """Call `fn(pod)` once the pod is built (e.g. `pod.use_kafka(EVENTS)`); an
        awaitable it returns is awaited by `start()`."""
        self._unbound("add a build hook")
        self._on_build.append(fn)
        return fn

    def _declare(self, target: _Target) -> None:
        check_target_name(target.name)
        self._unbound(f"declare target {target.name!r}")
        if target.name in self._targets:
            raise ConfigError(f"target {target.name!r} is declared twice")
        self._targets[target.name] = target

    def _unbound(self, what: str) -> None:
        if self._pod is not None:
            raise ConfigError(f"cannot {what}: the app is already built (declare first)")

    # --- building ----------------------------------------------------------------------
    def bind(
        self,
        settings: Settings | None = None,
        *,
        url: str | None = None,
        pod_id: str | None = None,
    ) -> Pod:
        """Build the pod from the declarations (the CLI passes its settings and
        `--store`); settings default to `App(settings=...)`, else the environment and
        JOBLEDGER_CONFIG."""
        if self._pod is not None:
            return self._pod
        if settings is None:
            settings = self.settings
        if settings is None:
            from jobledger.config.load import load_settings

            settings = load_settings()
        store = self.store_arg if url is None and not isinstance(self.store_arg, str) else None
        if url is None and isinstance(self.store_arg, str):
            url = self.store_arg
        pod = build(settings, store=store, url=url, clock=self.clock, pod_id=pod_id)
        self._install(pod)
        self._pod = pod
        self._pending.extend(self._run_build_hooks(pod))
        return pod

    def _run_build_hooks(self, pod: Pod) -> list[Any]:
        """Call the `on_build` hooks; the awaitables they returned."""
        results = [hook(pod) for hook in self._on_build]
        return [result for result in results if inspect.isawaitable(result)]

    def _install(self, pod: Pod, wrap: Callable[[Any], Any] | None = None) -> None:
        """Register the declared targets and schedules on `pod` (each handler passed
        through `wrap` when given: `testing()` watches what the handlers raise)."""
        targets = pod.engine.targets
        for t in self._targets.values():
            handler: Callable[..., Any] = t.handler or no_handler()
            if t.payload is not None:
                typed = PayloadType(t.payload)
                pod.engine.payload_types[t.name] = typed
                if t.handler is not None:
                    handler = typed_handler(t.handler, typed)
            if wrap is not None and t.handler is not None:
                handler = wrap(as_async(handler))
            targets.register(
                t.name,
                t.lane,
                handler,
                delivery_mode=t.delivery_mode,
                exclusive=t.exclusive,
                retry=t.retry,
                timeout_s=t.timeout_s,
            )
            if t.max_attempts is not None:
                targets.set_max_attempts(t.name, t.max_attempts)
        for code, cron, fn, options in self._schedules:
            pod.scheduler.declare(code, cron, fn, **options)

    @property
    def pod(self) -> Pod:
        return self._pod if self._pod is not None else self.bind()

    @property
    def engine(self) -> Any:
        return self.pod.engine

    @property
    def scheduler(self) -> Any:
        return self.pod.scheduler

    # --- running -----------------------------------------------------------------------
    async def start(self, *, workers: bool | None = None) -> None:
        """Open the store, sync the schedules and (with workers) start the lanes."""
        pod = self.pod
        run = pod.settings.workers if workers is None else workers
        missing = [t.name for t in self._targets.values() if t.handler is None]
        if run and missing:
            raise ConfigError(
                f"target {missing[0]!r} has no handler in this process: give it one with"
                " @app.target, or run this process without workers (JOBS_WORKERS=off)"
            )
        while self._pending:
            await self._pending.pop(0)
        await pod.start(workers=workers)

    async def stop(self) -> None:
        if self._pod is not None:
            await self._pod.stop()

    async def __aenter__(self) -> App:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # --- enqueueing --------------------------------------------------------------------
    def _started_pod(self, what: str) -> Pod:
        pod = self.pod
        if not pod._started:
            raise ConfigError(
                f"the app's store is not open: `async with app:` or `await app.start()`"
                f" (workers=False to run no jobs) before {what}"
            )
        return pod

    def transaction(self) -> AbstractAsyncContextManager[Any]:
        """A transaction on the store (the app must be started). `tx.native` is the
        store's own driver handle (sync `sqlite3` on SQLite, async psycopg on
        PostgreSQL): store-specific code only; portable and sync code enqueue on their
        own data layer's transaction (`jobledger.integrations`, docs/sync-callers.md)."""
        return self._started_pod("app.transaction()").engine.transaction()

    async def enqueue(
        self,
        target: str,
        payload: Any = None,
        *,
        tx: Any,
        key: str | None = None,
        version: int = 0,
        dedupe_key: str | None = None,
        run_at: datetime | timedelta | None = None,
        headers: Mapping[str, str] | None = None,
        code: str | None = None,
    ) -> Enqueued:
        """Append the job inside `tx`: `app.transaction()`'s, or your own async
        connection or session in a transaction (psycopg `AsyncConnection`, PyMongo
        session; SQLAlchemy's through `jobledger.integrations.sqlalchemy`). It commits
        with `tx` or not at all. `key` orders a target's jobs on the fast lane (by
        `version`, then enqueue order); `dedupe_key` makes the call idempotent (a second
        one writes nothing and returns the holder's id, `inserted` False); `run_at` is
        an aware datetime or a `timedelta` from now; `headers` travel with the job;
        `code` names it (the target by default). Sync code: `enqueue_sync`."""
        engine = self.pod.engine
        item = engine.new_job(
            target,
            payload,
            key=key,
            version=version,
            dedupe_key=dedupe_key,
            run_at=run_at,
            headers=headers,
            code=code,
        )
        return (await engine.enqueue_many([item], tx=tx))[0]

    async def enqueue_many(self, items: Sequence[NewJob], *, tx: Any) -> list[Enqueued]:
        """`enqueue` of several `jobledger.NewJob` items in one call (one statement on
        the SQL stores); every item is checked before anything is written."""
        return list(await self.pod.engine.enqueue_many(items, tx=tx))

    def enqueue_sync(
        self, target: str, payload: Any = None, *, tx: Any, **options: Unpack[EnqueueOptions]
    ) -> Enqueued:
        """`enqueue` from sync code, on your sync connection in its transaction (a
        `sqlite3.Connection` or a psycopg `Connection`; `jobledger.integrations.sync`):
        a Flask view, a script, a thread. No event loop is needed; the app need not be
        started (the workers run elsewhere). Options as `enqueue`."""
        item = self.pod.engine.new_job(target, payload, **options)
        return self.enqueue_many_sync([item], tx=tx)[0]

    def enqueue_many_sync(self, items: Sequence[NewJob], *, tx: Any) -> list[Enqueued]:
        """`enqueue_many` from sync code, on your sync connection (`enqueue_sync`)."""
        from jobledger.integrations import sync

        return sync.enqueue_many(self, tx, items)

    async def next_version(self, key: str, *, tx: Any) -> int:
        """`Engine.next_version`: the next version of `key` inside `tx`, for
        `enqueue(..., key=key, version=...)` when a key's jobs need an order across
        processes."""
        return await self.pod.engine.next_version(key, tx=tx)

    async def cancel(self, job_id: str, *, tx: Any) -> None:
        """Cancel a PENDING job inside `tx` (as `enqueue` takes it): it is gone when `tx`
        commits, and still there if it rolls back. A job that is RUNNING, in flight or
        finished is refused (InvalidStatus), as the admin cancel refuses it, and so is one
        that changed since it was read (the store's compare-and-set)."""
        pod = self.pod
        await JobAdmin(pod.store, pod.engine.clock).cancel_in(job_id, tx=tx)

    async def wait_done(self, *job_ids: str | None, timeout_s: float = 30.0) -> Done:
        """Wait until each job left the queue (succeeded, skipped, cancelled) or went
        DEAD, for scripts that enqueue and then watch the app's own workers deliver; how
        each ended (`Done.status`, `Done.dead`). None ids (lossy items) are passed over;
        an id no job has (one enqueued in a transaction that rolled back) raises
        NotFound."""
        store = self.pod.store
        admin = JobAdmin(store, self.pod.engine.clock)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        statuses: dict[str, str] = {}
        for job_id in job_ids:
            while job_id is not None:
                job = await store.admin.get_job(job_id)
                if job is None:
                    statuses[job_id] = (await admin.detail(job_id)).status
                    break
                if job.status == JobStatus.DEAD:
                    statuses[job_id] = "DEAD"
                    break
                if loop.time() > deadline:
                    raise TimeoutError(f"job {job_id} still {job.status.value} after {timeout_s}s")
                await asyncio.sleep(0.05)
        return Done(statuses)

    # --- tests -------------------------------------------------------------------------
    @asynccontextmanager
    async def testing(
        self,
        store: str | Store = "memory://",
        *,
        clock: Clock | None = None,
        settings: Settings | None = None,
    ) -> AsyncIterator[TestRun]:
        """Run the block on a store and clock of its own (the memory store and a
        `FakeClock` by default) with every declared target and schedule, started without
        workers: `await t.run_until_idle()` runs what is due. The app's own pod is back
        after the block (docs/testing.md)."""
        if self._testing:
            raise ConfigError("app.testing() is already open: one block at a time")
        clock = clock or FakeClock()
        url, own = (store, None) if isinstance(store, str) else (None, store)
        pod = build(settings or self.settings or Settings(), store=own, url=url, clock=clock)
        failures = Failures()
        self._install(pod, failures.wrap)
        pod._failures = failures  # type: ignore[attr-defined]
        for pending in self._run_build_hooks(pod):
            await pending
        saved, self._pod, self._testing = self._pod, pod, True
        try:
            await pod.start(workers=False)
            yield TestRun(self, pod, clock, failures)
        finally:
            try:
                await pod.stop()
            finally:
                self._pod, self._testing = saved, False

    async def run_until_idle(self, *, max_rounds: int = 1000) -> Ran:
        """Run every job (and schedule slot) due now, in this task, until nothing is
        due; for tests (docs/testing.md). See `jobledger.testing.run_until_idle`."""
        return await run_until_idle(self, max_rounds=max_rounds)
