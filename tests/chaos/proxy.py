"""A loopback TCP proxy in front of the broker that a chaos run can take down and bring back.

tansu keeps its topics in memory, so killing it loses what was written. To have the
broker disappear *while workers are live* without losing the topics, every client (the
workers, the recorder, the harness) talks to the broker through this proxy: tansu
advertises the proxy's port (tests/tansu.py, `advertised_port`), so reconnects after
a metadata refresh come back through it too. `down()` closes the listening socket (a
connect is refused by the kernel) and cuts every open connection; `up()` listens on the
same port again.

The proxy runs its own event loop in a thread, so a harness busy in its own loop (or
blocked in a synchronous wait for workers to stop) does not delay the brokered traffic.

It also counts Kafka frames (a 4-byte big-endian length, then the header: a request's
api key, version and correlation id, a response's correlation id): `produce_idle()` is
true when no open connection has a whole Produce request received and not yet answered
in whole, nor bytes waiting unread in its socket. With every producer stopped
that is a condition for "every acknowledgement a worker can still receive is already
on its way" (the broker-restart fault, `Recorder.quiesced`).
"""

from __future__ import annotations

import array
import asyncio
import fcntl
import socket
import termios
import threading
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.net import free_port
from tests.tansu import Tansu

PRODUCE = 0  # the Produce request's api key


class Frames:
    """Splits one direction of a Kafka connection into frames, keeping only each frame's
    first `header` bytes after the length (the rest is counted and skipped); a frame's
    header comes out once the whole frame has been received."""

    def __init__(self, header: int) -> None:
        self.header = header
        self.buf = bytearray()  # the length prefix and header of the frame being read
        self.skip = 0  # bytes of the current frame's body still to come
        self.current = b""  # the header of the frame whose body is being skipped

    @property
    def partial(self) -> bool:
        return bool(self.buf) or self.skip > 0

    def feed(self, data: bytes) -> list[bytes]:
        out: list[bytes] = []
        i, n, need = 0, len(data), 4 + self.header
        while i < n:
            if self.skip:
                take = min(self.skip, n - i)
                self.skip -= take
                i += take
                if not self.skip:
                    out.append(self.current)
                continue
            take = min(need - len(self.buf), n - i)
            self.buf += data[i : i + take]
            i += take
            if len(self.buf) == need:
                size = int.from_bytes(self.buf[:4], "big")
                self.current = bytes(self.buf[4:])
                self.skip = max(size - self.header, 0)
                self.buf.clear()
                if not self.skip:
                    out.append(self.current)
        return out


def unread_bytes(transport: asyncio.Transport | None) -> int:
    """Bytes waiting in the transport's socket that the proxy has not read yet."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or transport is None or transport.is_closing():
        return 0
    buf = array.array("i", [0])
    try:
        fcntl.ioctl(sock.fileno(), termios.FIONREAD, buf)
    except OSError:
        return 0
    return int(buf[0])


class _Side(asyncio.Protocol):
    """One end of a piped connection; writes what it receives to its peer."""

    def __init__(self, proxy: LoopbackProxy, client: bool) -> None:
        self.proxy = proxy
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.pending: list[bytes] = []  # received before the peer connected
        # requests (client side): api key, version, correlation id; responses: the id
        self.frames = Frames(8 if client else 4)
        self.produces: set[int] = set()  # client side: Produce requests not answered yet

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.proxy.sides.add(self)
        if self.client:
            self.proxy.dial(self)

    def attach(self, peer: _Side) -> None:
        self.peer = peer
        if peer.transport is not None:
            for data in self.pending:
                peer.transport.write(data)
        self.pending.clear()

    def data_received(self, data: bytes) -> None:
        for header in self.frames.feed(data):
            if self.client:
                if int.from_bytes(header[:2], "big", signed=True) == PRODUCE:
                    self.produces.add(int.from_bytes(header[4:8], "big", signed=True))
            elif self.peer is not None:
                self.peer.produces.discard(int.from_bytes(header[:4], "big", signed=True))
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.write(data)
        else:
            self.pending.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.proxy.sides.discard(self)
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()  # flushes what is buffered, then closes

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


class LoopbackProxy:
    """Listens on 127.0.0.1:`port`, forwards every connection to 127.0.0.1:`upstream`."""

    def __init__(self, upstream: int, port: int | None = None) -> None:
        self.upstream = upstream
        self.port = port or free_port()
        self.sides: set[_Side] = set()
        self.connections = 0  # client connections accepted, over the proxy's life
        self._server: asyncio.AbstractServer | None = None
        self._dials: set[asyncio.Task[None]] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="chaos-proxy", daemon=True
        )

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def listening(self) -> bool:
        return self._server is not None

    async def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def start(self) -> None:
        self._thread.start()
        await self.up()

    async def stop(self) -> None:
        """Cut everything, stop the loop and its thread, close the loop (safe to call
        twice, and after a failed start)."""
        if self._thread.is_alive():
            try:
                await self._call(self._down())
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
                await asyncio.to_thread(self._thread.join, 10)
        if not self._loop.is_running() and not self._loop.is_closed():
            self._loop.close()

    async def up(self) -> None:
        await self._call(self._up())

    async def down(self) -> int:
        """Stop listening and cut every open client connection; returns how many."""
        cut: int = await self._call(self._down())
        return cut

    def refuses(self) -> bool:
        """A fresh connect to the proxy's port is refused (checked from outside)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0):
                return False
        except ConnectionRefusedError:
            return True
        except OSError:  # timed out, reset: not the refusal the fault promises
            return False

    async def produce_idle(self) -> bool:
        """No Produce request unanswered, no frame half read, no bytes unread, on any
        open connection (see the module docstring)."""
        idle: bool = await self._call(self._produce_idle())
        return idle

    # --- on the proxy's loop --------------------------------------------------------

    async def _produce_idle(self) -> bool:
        # a request cut short (a worker stopped mid-write) cannot be answered: only whole
        # Produce requests count, and bytes not read yet might complete one
        return not any(side.produces or unread_bytes(side.transport) for side in self.sides)

    async def _up(self) -> None:
        if self._server is None:
            self._server = await self._loop.create_server(
                lambda: _Side(self, client=True), "127.0.0.1", self.port, reuse_address=True
            )

    async def _down(self) -> int:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()
        for task in list(self._dials):
            task.cancel()
        if self._dials:
            await asyncio.gather(*self._dials, return_exceptions=True)
        sides = list(self.sides)
        for side in sides:
            if side.transport is not None:
                side.transport.abort()
        await asyncio.sleep(0)  # let connection_lost run
        return sum(side.client for side in sides)

    def dial(self, client: _Side) -> None:
        self.connections += 1
        task = self._loop.create_task(self._dial(client))
        self._dials.add(task)
        task.add_done_callback(self._dials.discard)

    async def _dial(self, client: _Side) -> None:
        upstream = _Side(self, client=False)
        try:
            await self._loop.create_connection(lambda: upstream, "127.0.0.1", self.upstream)
        except OSError:  # the broker is gone: the client sees its connection close
            if client.transport is not None:
                client.transport.close()
            return
        upstream.attach(client)
        client.attach(upstream)
        if (client.transport is None or client.transport.is_closing()) and upstream.transport:
            upstream.transport.close()  # the client left while the proxy dialled


@asynccontextmanager
async def broker_behind_proxy(workdir: Path) -> AsyncIterator[tuple[Tansu, LoopbackProxy]]:
    """tansu on a free port, advertising the proxy in front of it: every client uses
    `proxy.bootstrap`. The proxy stops after the broker, whatever happened."""
    proxy = LoopbackProxy(free_port())
    try:
        await proxy.start()
        async with Tansu.running(workdir, proxy.upstream, proxy.port) as broker:
            yield broker, proxy
    finally:
        await proxy.stop()
