"""A worker's own HTTP endpoint: `/metrics`, `/healthz` and `/readyz` on `metrics_port`.

    jobledger worker --app myapp:app --metrics-port 9100     # or JOBLEDGER_METRICS_PORT

`jobledger worker` serves nothing else, and a `serve --no-workers` process cannot see a
worker's counters, pauses or event loop, so each worker answers for itself:

- `/metrics`: the Prometheus exposition of the engine's own registry
  (`jobledger.observability.metrics`; 501 without prometheus_client);
- `/healthz`: 200 while the process answers and its event loop has run its probe
  within `worker_live_s` (the age after which other pods count it gone), else 503;
- `/readyz`: 200 when the store answers a read (run on the event loop, 2 s at most),
  the lanes are started (or workers are off) and the pod's heartbeat went through
  within `worker_live_s`; else 503 naming what is missing.

The server is the standard library's `ThreadingHTTPServer` in a thread of its own (no
`[http]` extra, no second event loop): it answers while the event loop is blocked, so
a scrape during a stall shows `jobledger_event_loop_stalled_seconds` growing and
`/healthz` failing. It binds 127.0.0.1 unless `metrics_host` says otherwise, speaks
HTTP/1.0 (one request a connection), serves GET and HEAD only, gives a client 10 s to
send its request and serves at most `MAX_CLIENTS` connections at once (others are
closed at once). Decision D45 says why not uvicorn or prometheus_client's own server.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from time import monotonic
from typing import Any
from urllib.parse import urlsplit

from jobledger.domain.errors import ConfigError
from jobledger.observability.observe import Observer

logger = logging.getLogger("jobledger.metrics_server")

READY_TIMEOUT_S = 2.0
PROBE_ID = "0" * 32  # no job has this id: the readiness read finds nothing, cheaply
MAX_CLIENTS = 8
REQUEST_TIMEOUT_S = 10.0


class WorkerHealth(Observer):
    """What `/healthz` and `/readyz` read, from any thread: the pod's runtime, its last
    heartbeat (`partitions_owned` follows every beat that went through), the event-loop
    monitor, and a store read run on the loop."""

    def __init__(
        self, store: Any, runtime: Any, live_s: float, loop_stalled_s: Callable[[], float]
    ) -> None:
        self.store = store
        self.runtime = runtime
        self.live_s = live_s
        self.loop_stalled_s = loop_stalled_s
        self.loop: asyncio.AbstractEventLoop | None = None
        self._last_beat: float | None = None

    def partitions_owned(self, pod: str, count: int) -> None:
        if pod == self.runtime.pod:
            self._last_beat = monotonic()

    def live(self) -> tuple[bool, dict[str, Any]]:
        stalled = self.loop_stalled_s()
        ok = stalled <= self.live_s
        return ok, {"status": "ok" if ok else "stalled", "loop_stalled_s": round(stalled, 3)}

    def ready(self) -> tuple[bool, dict[str, Any]]:
        checks: dict[str, Any] = {}
        problems: list[str] = []
        workers = bool(self.runtime.workers_on)
        if not self.runtime.started:
            checks["lanes"] = "not started"
            problems.append("lanes")
        else:
            checks["lanes"] = "started" if workers else "off (JOBS_WORKERS=off)"
        if workers:
            beat = self._last_beat
            age = None if beat is None else monotonic() - beat
            checks["heartbeat_age_s"] = None if age is None else round(age, 3)
            if age is None or age > self.live_s:
                problems.append("heartbeat")
        store = self._store_answers()
        checks["store"] = store
        if store != "ok":
            problems.append("store")
        body: dict[str, Any] = {"status": "not_ready" if problems else "ready", "checks": checks}
        if problems:
            body["missing"] = problems
        return not problems, body

    def _store_answers(self) -> str:
        loop = self.loop
        if loop is None or loop.is_closed():
            return "no event loop"
        try:
            future = asyncio.run_coroutine_threadsafe(
                asyncio.wait_for(self.store.admin.get_job(PROBE_ID), READY_TIMEOUT_S), loop
            )
        except RuntimeError as exc:  # the loop stopped between the check and the call
            return f"no event loop ({exc})"
        try:
            future.result(READY_TIMEOUT_S + 0.5)
        except TimeoutError:
            future.cancel()
            return f"no answer within {READY_TIMEOUT_S:g} s (store or event loop stalled)"
        except Exception as exc:
            return f"{type(exc).__name__}: {str(exc)[:200]}"
        return "ok"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 16

    def __init__(self, address: tuple[str, int], family: int, app: _App) -> None:
        self.address_family = family
        self.app = app
        self._slots = threading.BoundedSemaphore(MAX_CLIENTS)
        super().__init__(address, _Handler, bind_and_activate=False)
        if family == socket.AF_INET6:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            self.server_bind()
            self.server_activate()
        except OSError:
            self.server_close()
            raise

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # MAX_CLIENTS busy: no thread for this one
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class _App:
    def __init__(self, health: WorkerHealth, registry: Any) -> None:
        self.health = health
        self.registry = registry

    def answer(self, path: str, accept: str | None) -> tuple[int, str, bytes]:
        if path == "/metrics":
            return self.metrics(accept)
        if path == "/healthz":
            ok, body = self.health.live()
        elif path == "/readyz":
            ok, body = self.health.ready()
        else:
            return 404, "text/plain; charset=utf-8", b"not found: /metrics, /healthz, /readyz\n"
        return 200 if ok else 503, "application/json", json.dumps(body).encode() + b"\n"

    def metrics(self, accept: str | None) -> tuple[int, str, bytes]:
        if self.registry is None:
            text = b"prometheus_client is not installed: pip install 'jobledger[http]'\n"
            return 501, "text/plain; charset=utf-8", text
        from prometheus_client.exposition import choose_encoder

        encoder, content_type = choose_encoder(accept or "")
        return 200, content_type, encoder(self.registry)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "jobledger"
    sys_version = ""
    timeout = REQUEST_TIMEOUT_S

    def do_GET(self) -> None:
        self._answer(head=False)

    def do_HEAD(self) -> None:
        self._answer(head=True)

    def _answer(self, *, head: bool) -> None:
        try:
            status, content_type, body = self.server.app.answer(
                urlsplit(self.path).path, self.headers.get("Accept")
            )
        except Exception:
            logger.exception("metrics server: answering %s failed", self.path[:200])
            status, content_type, body = 500, "text/plain; charset=utf-8", b"internal error\n"
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        """No line per scrape."""


class MetricsServer:
    """`start()` binds (a taken port raises ConfigError, one line) and serves in a
    thread; `attach(loop)` gives the readiness check the event loop; `stop()` ends it."""

    def __init__(self, health: WorkerHealth, registry: Any, host: str, port: int) -> None:
        self.health = health
        self.registry = registry
        self.host = host
        self.port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        assert self._server is not None, "not started"
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        try:
            family, _, _, _, address = socket.getaddrinfo(
                self.host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )[0]
            bind = (str(address[0]), int(address[1]))
            self._server = _Server(bind, family, _App(self.health, self.registry))
        except OSError as exc:
            raise ConfigError(
                f"cannot serve metrics on {self.host}:{self.port}: {exc.strerror or exc}"
            ) from exc
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.5},
            name="jobledger-metrics-server",
            daemon=True,
        )
        self._thread.start()

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self.health.loop = loop

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None


def worker_server(pod: Any, host: str, port: int) -> MetricsServer:
    """The metrics server of a built pod (`jobledger.pod.Pod`): its engine's registry,
    its event-loop monitor, its store and runtime. The health observer is added to the
    engine's observers here, so start the pod after this (its first beat counts)."""
    from jobledger.observability.loop_lag import LoopMonitor

    observers = pod.engine.observers
    monitor = next((o for o in observers.observers if isinstance(o, LoopMonitor)), None)
    health = WorkerHealth(
        pod.store,
        pod.runtime,
        pod.settings.worker_live_s,
        monitor.stalled_s if monitor is not None else (lambda: 0.0),
    )
    observers.add(health)
    return MetricsServer(health, _registry_of(observers), host, port)


def _registry_of(observers: Any) -> Any:
    try:
        from jobledger.observability.metrics import MetricsObserver
    except ImportError:
        return None
    found = [o for o in observers.observers if isinstance(o, MetricsObserver)]
    return found[0].registry if found else None
