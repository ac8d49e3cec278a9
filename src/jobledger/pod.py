"""The composition root: one place that builds a running pod from Settings.

Applications use `jobledger.App` (jobledger/app.py), which declares targets and schedules
and builds its `Pod` here when it starts:

    pod = build(load_settings())          # store, Engine, Scheduler, Runtime, HTTP
    pod.scheduler.declare("nightly", "0 2 * * *", handler)
    pod.engine.targets.register("mail:welcome", "long", send)
    await pod.start()                     # open the store, sync schedules, start workers
    await pod.serve_http("127.0.0.1", 8080)   # until stopped
    await pod.stop()

What a pod runs, in start order: the lossy runner (hand-off works even with workers
off), then — with workers on — the runtime's services (the Kafka producer), the lanes,
and its reactors (schedule ticker, stats projection, DEAD retention, the log archive).
Stopping runs the other way round. Telemetry (run lines, alerts, Prometheus metrics,
OpenTelemetry spans) hangs off `engine.observers`; missing optional packages leave
their observer out with a warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobledger.admin.jobs import JobAdmin
from jobledger.config.settings import Settings
from jobledger.core.clock import Clock, SystemClock
from jobledger.engine import Engine
from jobledger.reactors.runtime import Reactor, Runtime
from jobledger.storage.port import Store
from jobledger.storage.urls import open_store, store_url

logger = logging.getLogger("jobledger.pod")


@dataclass
class Pod:
    settings: Settings
    store: Store
    engine: Engine
    scheduler: Any  # jobledger.reactors.scheduler.Scheduler
    runtime: Runtime
    keys: Mapping[str, Any]  # API key -> jobledger.http.auth.Principal
    generated_key: str | None = None  # set when no key was configured (printed by serve/demo)
    lossy: Any = None  # jobledger.targets.lossy.runner.LossyRunner
    kafka: Any = None  # jobledger.targets.kafka.target.KafkaTarget, once use_kafka() was called
    _http: Any = None
    _server: Any = None
    _started: bool = False
    _workers: list[Any] = field(default_factory=list)

    @property
    def http(self) -> Any:
        """The Starlette application (built on first use; needs the `http` extra)."""
        if self._http is None:
            from jobledger.http.app import create_app
            from jobledger.http.auth import ApiKeys
            from jobledger.http.services import Services

            services = Services(
                store=self.store,
                clock=self.engine.clock,
                jobs=JobAdmin(self.store, self.engine.clock),
                schedules=self.scheduler,
                paused=self.paused_targets,
                worker_live_s=self.settings.worker_live_s,
                max_attempts=self.engine.targets.max_attempts,
            )
            self._http = create_app(
                services, ApiKeys(self.keys), forwarded_allow_ips=self.settings.forwarded_allow_ips
            )
        return self._http

    def paused_targets(self) -> dict[str, datetime] | None:
        """Targets paused on this pod's worker and since when; None when it runs none."""
        runtime = self.runtime
        return runtime.pauses.paused() if runtime.started and runtime.workers_on else None

    def target(self, name: str, lane: str = "fast", **options: Any) -> Callable[[Any], Any]:
        """`@pod.target("mail:welcome", "long", delivery_mode="at_least_once")` registers
        the function below it as the target's handler (`engine.targets.target`)."""
        return self.engine.targets.target(name, lane, **options)

    def use_kafka(self, events: Sequence[Any] = (), **options: Any) -> Any:
        """Register the `kafka:<topic>` targets (declared producer events, plus
        KAFKA_TARGET_TOPICS) and run their producer as a runtime service."""
        from jobledger.targets.kafka.target import install_kafka

        if self.kafka is not None:
            raise RuntimeError("use_kafka() was already called")
        self.kafka = install_kafka(
            self.engine, events, bootstrap=options.pop("bootstrap", None), **options
        )
        self.runtime.services.append(self.kafka)
        return self.kafka

    async def start(self, *, workers: bool | None = None) -> None:
        """Open the store, sync the declared schedules, start the lossy runner and (with
        workers) the runtime. `workers` defaults to `settings.workers`."""
        await self.store.open()
        run = self.settings.workers if workers is None else workers
        try:
            if self.lossy is not None:
                await self.lossy.start()
            if run:
                await self.runtime.start()
            else:
                await self.scheduler.sync()
        except BaseException:
            # a boot that fails half-way (a dropped connection during the schedule sync)
            # must not leave lanes, heartbeats or the lossy consumer running
            await self._stop_parts()
            raise
        self._started = True

    async def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._started:
            await self._stop_parts()
            self._started = False
        await self.store.close()

    async def _stop_parts(self) -> None:
        await self.runtime.stop()
        await self.scheduler.stop()
        if self.lossy is not None:
            await self.lossy.stop()

    async def serve_http(
        self,
        host: str = "127.0.0.1",
        port: int = 8080,
        *,
        on_ready: Callable[[str], None] | None = None,
        until: asyncio.Event | None = None,
        sock: socket.socket | None = None,
    ) -> None:
        """Serve the admin API and page with uvicorn until `until` is set (or `stop()`).

        `on_ready(base_url)` is called once the socket listens (port 0 picks a free
        one). Signals are the caller's business: uvicorn's own handlers stay off.
        `sock`: a socket already listening (`jobledger.http.listen.listen`), else one is
        bound here; a taken port raises `ListenError` (an OSError).
        """
        from jobledger.http.listen import listen

        sock = sock or listen(host, port)
        server = _server(self.http, host, port)
        self._server = server
        task = asyncio.create_task(server.serve(sockets=[sock]), name="jobledger-http")
        waiter = asyncio.create_task((until or asyncio.Event()).wait())
        try:
            while not server.started:
                if task.done():
                    await task  # raises the bind error
                    raise OSError(f"could not listen on {host}:{port}")
                await asyncio.sleep(0.02)
            if on_ready is not None:
                sock = server.servers[0].sockets[0]
                bound_host, bound_port = sock.getsockname()[:2]
                on_ready(f"http://{bound_host}:{bound_port}")
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self._server = None


def _server(asgi: Any, host: str, port: int) -> Any:
    import uvicorn

    class QuietServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    # proxy_headers off: the app reads X-Forwarded-For from configured proxies only
    config = uvicorn.Config(
        asgi,
        host=host,
        port=port,
        log_level="warning",
        lifespan="off",
        access_log=False,
        proxy_headers=False,
    )
    return QuietServer(config)


def build(
    settings: Settings | None = None,
    *,
    store: Store | None = None,
    url: str | None = None,
    clock: Clock | None = None,
    api_keys: str | None = None,
    pod_id: str | None = None,
) -> Pod:
    """Wire a store (from `url`, `settings.store_url`, JOBLEDGER_STORE or the SQLite
    default), the engine with its telemetry, the scheduler, the lossy runner, the lane
    runtime with its reactors, Kafka when KAFKA_TARGET_TOPICS names topics, and the
    admin keys."""
    from jobledger.observability.logs import install_observers
    from jobledger.projections.archive import LogArchive
    from jobledger.projections.retention import Retention
    from jobledger.projections.stats import stats_reactor
    from jobledger.reactors.scheduler import Scheduler
    from jobledger.targets.lossy.install import install_lossy

    settings = settings or Settings()
    if store is None:
        store = open_store(
            store_url(url or settings.store_url),
            partitions=settings.partitions,
            schema=settings.postgres_schema,
            mongodb_dead_ttl_seconds=settings.mongodb_dead_ttl_seconds,
        )
    engine = Engine(store, clock=clock or SystemClock(), settings=settings)
    telemetry = install_observers(engine, settings)
    scheduler = Scheduler(engine)
    reactors: list[Reactor] = [
        scheduler,
        stats_reactor(engine),
        Retention.for_engine(engine),
        LogArchive(
            store,
            settings.log_archive_dir,
            retention_days=settings.log_retention_days,
            clock=engine.clock,
        ),
        *([telemetry.loop] if telemetry.loop is not None else []),
    ]
    runtime = Runtime(engine, pod_id=pod_id, reactors=reactors)
    keys, generated = _keys(settings, api_keys)
    app = Pod(
        settings,
        store,
        engine,
        scheduler,
        runtime,
        keys,
        generated,
        lossy=install_lossy(engine, settings),
    )
    if settings.kafka_target_topics:
        app.use_kafka(())
    return app


def _keys(settings: Settings, explicit: str | None) -> tuple[dict[str, Any], str | None]:
    """Configured API keys; with none, one generated admin key for this process."""
    try:
        from jobledger.config.api_keys import Principal, parse_api_keys
        from jobledger.http.auth import generate_key
    except ImportError:  # the http extra is not installed: no HTTP, no keys needed
        return {}, None
    keys = parse_api_keys(explicit) if explicit else parse_api_keys(settings.api_keys)
    if keys:
        return dict(keys), None
    key = generate_key()
    return {key: Principal("admin", "admin")}, key
