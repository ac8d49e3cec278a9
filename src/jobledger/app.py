"""The composition root: one place that builds a running jobledger from Settings.

    app = build(load_settings())          # store, Engine, Scheduler, Runtime, HTTP
    app.scheduler.declare("nightly", "0 2 * * *", handler)
    app.engine.targets.register("mail:welcome", "long", send)
    await app.start()                     # open the store, sync schedules, start workers
    await app.serve_http("127.0.0.1", 8080)   # until stopped
    await app.stop()

Parts that are optional at run time (the lane runtime, Prometheus metrics) are
picked up when their modules are importable, so this file grows as parts land.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from jobledger.admin import JobAdmin
from jobledger.clock import Clock, SystemClock
from jobledger.engine import Engine
from jobledger.settings import Settings
from jobledger.storage.port import Store
from jobledger.storage.urls import open_store, store_url

logger = logging.getLogger("jobledger.app")


@dataclass
class App:
    settings: Settings
    store: Store
    engine: Engine
    scheduler: Any  # jobledger.reactors.scheduler.Scheduler
    runtime: Any | None  # jobledger.reactors.runtime.Runtime, when that part is present
    keys: Mapping[str, Any]  # API key -> jobledger.http.auth.Principal
    generated_key: str | None = None  # set when no key was configured (printed by serve/demo)
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
            )
            self._http = create_app(services, ApiKeys(self.keys))
        return self._http

    async def start(self, *, workers: bool | None = None) -> None:
        """Open the store, sync the declared schedules, and (with workers) start the
        lanes and the schedule ticker. `workers` defaults to `settings.workers`."""
        await self.store.open()
        run = self.settings.workers if workers is None else workers
        if self.runtime is not None and run:
            await self.runtime.start()
        elif run:
            await self.scheduler.start()
        else:
            await self.scheduler.sync()
        self._started = True

    async def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._started:
            if self.runtime is not None:
                await self.runtime.stop()
            await self.scheduler.stop()
            self._started = False
        await self.store.close()

    async def serve_http(
        self,
        host: str = "127.0.0.1",
        port: int = 8080,
        *,
        on_ready: Callable[[str], None] | None = None,
        until: asyncio.Event | None = None,
    ) -> None:
        """Serve the admin API and page with uvicorn until `until` is set (or `stop()`).

        `on_ready(base_url)` is called once the socket listens (port 0 picks a free
        one). Signals are the caller's business: uvicorn's own handlers stay off.
        """
        server = _server(self.http, host, port)
        self._server = server
        task = asyncio.create_task(server.serve(), name="jobledger-http")
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

    config = uvicorn.Config(
        asgi, host=host, port=port, log_level="warning", lifespan="off", access_log=False
    )
    return QuietServer(config)


def _runtime_class() -> Any | None:
    try:
        module = importlib.import_module("jobledger.reactors.runtime")
    except ImportError:
        return None
    return getattr(module, "Runtime", None)


def build(
    settings: Settings | None = None,
    *,
    store: Store | None = None,
    url: str | None = None,
    clock: Clock | None = None,
    api_keys: str | None = None,
    pod_id: str | None = None,
) -> App:
    """Wire a store (from `url`, `settings.store_url`, JOBLEDGER_STORE or the SQLite
    default), the engine, the scheduler, the lane runtime and the admin keys."""
    from jobledger.reactors.scheduler import Scheduler

    settings = settings or Settings()
    if store is None:
        store = open_store(store_url(url or settings.store_url), partitions=settings.partitions)
    engine = Engine(store, clock=clock or SystemClock(), settings=settings)
    scheduler = Scheduler(engine)
    keys, generated = _keys(settings, api_keys)
    runtime_cls = _runtime_class()
    runtime = runtime_cls(engine, pod_id=pod_id, reactors=(scheduler,)) if runtime_cls else None
    return App(settings, store, engine, scheduler, runtime, keys, generated)


def _keys(settings: Settings, explicit: str | None) -> tuple[dict[str, Any], str | None]:
    """Configured API keys; with none, one generated admin key for this process."""
    try:
        from jobledger.http.auth import Principal, generate_key, parse_api_keys
    except ImportError:  # the http extra is not installed: no HTTP, no keys needed
        return {}, None
    keys = parse_api_keys(explicit) if explicit else parse_api_keys(settings.api_keys)
    if keys:
        return dict(keys), None
    key = generate_key()
    return {key: Principal("admin", "admin")}, key
