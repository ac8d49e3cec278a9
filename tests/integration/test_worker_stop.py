"""SIGTERM while PostgreSQL is unreachable: a real `jobledger worker` exits within its
`stop_timeout_s`, and another worker drains everything once the database is back.

The chaos run once failed on this: every invariant held, but a worker did not exit
within 20 s of SIGTERM right after a PostgreSQL restart. Each database wait of the stop
path (the pool's 30 s checkout, the listener's reconnects, the outcome writes of the
runs in flight, releasing the partitions, deleting the liveness row) waited in turn.

The worker reaches PostgreSQL through a TCP proxy owned by the test, so the database
can be made unreachable for that worker alone (the shared server keeps running):

* `refuse` — every connection through the proxy is cut and new ones are closed at once,
  what a worker sees while PostgreSQL restarts;
* `silent` — every connection is cut and new ones are accepted but never answered, a
  network partition: a connect attempt hangs instead of failing.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import time
from pathlib import Path

import pytest

from jobledger.cli._stopping import EXIT_STOP_TIMEOUT
from jobledger.config.settings import Settings
from jobledger.domain.jobs import JobStatus
from jobledger.engine import Engine
from jobledger.storage.urls import open_store
from tests.integration import multiprocess_app
from tests.integration.test_multiprocess_lanes import (
    APP,
    JOBLEDGER,
    ROOT,
    Workers,
    deliveries,
    lease_counts,
    store_url,
    wait_until,
)
from tests.stores import all_jobs

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

STOP_TIMEOUT_S = 4.0
#: interpreter teardown, log flushing and the test's own polling
MARGIN_S = 3.0


class Proxy:
    """Forwards TCP connections to PostgreSQL until `cut()`; `mend()` forwards again."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.mode = "forward"  # forward | refuse | silent
        self.listen_port = 0
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.listen_port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        self.cut("refuse")
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def cut(self, mode: str) -> None:
        """Drop every connection through the proxy; new ones are refused or ignored."""
        self.mode = mode
        for writer in list(self._links):
            writer.transport.abort()
        self._links.clear()

    def mend(self) -> None:
        self.mode = "forward"

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._links.add(writer)
        if self.mode == "refuse":
            writer.transport.abort()
            return
        if self.mode == "silent":
            return  # held open, never answered (cut() or close() aborts it)
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        except OSError:
            writer.transport.abort()
            return
        self._links.add(up_writer)
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(src, dst))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        dst.transport.abort()
        self._links.discard(dst)


def via(url: str, port: int) -> str:
    """`url` with its host:port replaced by the proxy's."""
    scheme, rest = url.split("://", 1)
    netloc, path = rest.split("/", 1)
    user = netloc.rsplit("@", 1)[0] + "@" if "@" in netloc else ""
    return f"{scheme}://{user}127.0.0.1:{port}/{path}"


def upstream(url: str) -> tuple[str, int]:
    netloc = url.split("://", 1)[1].split("/", 1)[0].rsplit("@", 1)[-1]
    host, _, port = netloc.partition(":")
    return host or "127.0.0.1", int(port or 5432)


def spawn(workers: Workers, url: str, name: str, log: Path) -> subprocess.Popen[bytes]:
    """A worker like `Workers.spawn`, on `url`, logging at INFO (the stop's steps)."""
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [
                str(JOBLEDGER),
                "--store",
                url,
                "worker",
                "--app",
                APP,
                "--pod-id",
                name,
                "--log-level",
                "INFO",
            ],
            cwd=ROOT,
            env=workers.env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    workers.procs.append(proc)
    return proc


@pytest.mark.parametrize("mode", ["refuse", "silent"])
async def test_sigterm_with_the_database_unreachable_exits_within_the_stop_timeout(
    mode: str, tmp_path: Path
) -> None:
    out = tmp_path / "out.jsonl"
    async with store_url("postgres", tmp_path) as url:
        proxy = Proxy(*upstream(url))
        await proxy.start()
        store = open_store(url)
        await store.open()
        engine = Engine(store, settings=Settings())
        multiprocess_app.setup(engine)
        workers = Workers(url, out, 0.05)  # each delivery takes 50 ms: runs are in flight
        workers.env["JOBLEDGER_STOP_TIMEOUT_S"] = str(STOP_TIMEOUT_S)
        try:
            victim = spawn(workers, via(url, proxy.listen_port), "victim", tmp_path / "victim.log")

            async def owns_all() -> bool:
                return (await lease_counts(store)).get("victim") == 64

            await wait_until(owns_all, 60, "the victim to own every partition")
            ids: list[str] = []
            async with engine.transaction() as tx:
                for target in ("mp:amo", "mp:alo", "mp:long"):
                    for key in range(30):
                        for version in range(1, 4):
                            done = await engine.enqueue(
                                target,
                                {"v": version},
                                tx=tx,
                                key=f"{target}-{key}",
                                version=version,
                            )
                            assert done.job_id is not None
                            ids.append(done.job_id)

            async def running() -> bool:
                return len(deliveries(out)) >= 20

            await wait_until(running, 30, "the victim to deliver")
            proxy.cut(mode)
            await asyncio.sleep(0.5)  # the worker notices: its listener starts reconnecting
            victim.send_signal(signal.SIGTERM)
            sent = time.monotonic()
            code = await asyncio.to_thread(_wait, victim, STOP_TIMEOUT_S + MARGIN_S + 30)
            took = time.monotonic() - sent
            log = (tmp_path / "victim.log").read_text(errors="replace")
            assert code is not None, f"the worker did not exit within 30 s\n{log[-3000:]}"
            assert took <= STOP_TIMEOUT_S + MARGIN_S, (
                f"exit took {took:.1f}s (stop timeout {STOP_TIMEOUT_S}s)\n{log[-3000:]}"
            )
            if mode == "refuse":  # every wait fails fast: the stop itself finishes
                assert code == 0, f"exit code {code}\n{log[-3000:]}"
            else:  # a connect may hang past the deadline (the pool's close waits for it)
                assert code in (0, EXIT_STOP_TIMEOUT), f"exit code {code}\n{log[-3000:]}"

            # the database is back: a second worker takes the expired leases over and
            # drains every row; nothing the victim left unwritten is lost
            proxy.mend()
            workers.spawn("heir", tmp_path / "heir.log")

            async def drained() -> bool:
                return all(j.status == JobStatus.DEAD for j in await all_jobs(store))

            await wait_until(drained, 60, "every row to be delivered or DEAD")
            assert workers.stop_all()[1:] == [0]
            rows = {j.id: j for j in await all_jobs(store)}
        finally:
            workers.stop_all()
            await store.close()
            await proxy.close()

    count: dict[str, int] = {}
    for d in deliveries(out):
        count[d["id"]] = count.get(d["id"], 0) + 1
    target_of = {
        job_id: target
        for job_id, target in zip(
            ids, [t for t in ("mp:amo", "mp:alo", "mp:long") for _ in range(90)], strict=True
        )
    }
    for job_id, target in target_of.items():
        if target == "mp:amo":
            assert count.get(job_id, 0) <= 1
            if not count.get(job_id):
                assert rows[job_id].status == JobStatus.DEAD
        else:
            assert count.get(job_id, 0) >= 1, f"{target} job {job_id} never delivered"
            assert job_id not in rows


def _wait(proc: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return None
