"""The MongoDB adapter in the contract suite.

Runs when JOBLEDGER_TEST_MONGO_URI names a replica set (transactions and change streams
need one); otherwise every MongoDB test skips and says why. No MongoDB server can be
installed on the project's own machines, and no container engine runs there.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from jobledger.domain.jobs import Job
from jobledger.storage.port import Store, native_handle

SKIP_REASON = (
    "MongoDB tests skipped: JOBLEDGER_TEST_MONGO_URI is not set and no Docker engine is "
    "reachable for a testcontainers replica set (no MongoDB server can be installed on "
    "this machine; point the variable at a replica set, e.g. "
    "mongodb://localhost:27017/?replicaSet=rs0&directConnection=true)"
)


_current: dict[str, str] = {}


def mongo_uri() -> str | None:
    """JOBLEDGER_TEST_MONGO_URI, else a single-node replica set in a container when a
    Docker engine answers, else None."""
    explicit = os.environ.get("JOBLEDGER_TEST_MONGO_URI")
    if explicit:
        return explicit
    if "uri" not in _container:
        _container["uri"] = _start_container()
    return _container["uri"]


_container: dict[str, str | None] = {}


def _docker_answers() -> bool:
    """Whether a Docker engine answers `GET /_ping` on its unix socket."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return True  # a remote engine: let testcontainers try it
    path = host.removeprefix("unix://")
    if not os.path.exists(path):
        return False
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(2.0)
        try:
            sock.connect(path)
            sock.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
            return b" 200 " in sock.recv(64)
        except OSError:
            return False


def _start_container() -> str | None:
    if not _docker_answers():
        return None
    import atexit

    from testcontainers.core.container import DockerContainer  # type: ignore[import-untyped]
    from testcontainers.core.waiting_utils import wait_for_logs  # type: ignore[import-untyped]

    container = DockerContainer("mongo:7").with_command("--replSet rs0 --bind_ip_all")
    container.with_exposed_ports(27017).start()
    atexit.register(container.stop)
    wait_for_logs(container, "Waiting for connections")
    initiate = 'rs.initiate({_id: "rs0", members: [{_id: 0, host: "localhost:27017"}]})'
    container.exec(["mongosh", "--quiet", "--eval", initiate])
    for _ in range(120):  # the first test must not meet NotWritablePrimary
        done = container.exec(["mongosh", "--quiet", "--eval", "db.hello().isWritablePrimary"])
        if done.output.strip() == b"true":
            break
        time.sleep(0.5)
    host, port = container.get_container_host_ip(), container.get_exposed_port(27017)
    return f"mongodb://{host}:{port}/?replicaSet=rs0&directConnection=true"


@asynccontextmanager
async def make_store(tmp_path: Path, partitions: int = 64) -> AsyncIterator[Store]:
    uri = mongo_uri()
    if uri is None:
        pytest.skip(SKIP_REASON)
    from jobledger.storage.mongodb import MongoStore

    database = f"jobledger_test_{uuid.uuid4().hex[:12]}"
    _current["database"] = database
    store = MongoStore(uri, partitions=partitions, database=database)
    await store.open()
    # the business module's collection exists before any transaction writes to it:
    # transactions that each create it implicitly would conflict on the catalog
    await store.db.create_collection("business")
    try:
        yield store
    finally:
        await store.client.drop_database(database)
        await store.close()


async def business_write(tx: Any, value: Any) -> None:
    """The business module's own write, in the caller's session and transaction."""
    session = native_handle(tx)
    await session.client[_current["database"]].business.insert_one(
        {"value": value}, session=session
    )


async def business_count(store: Store) -> int:
    from jobledger.storage.mongodb import MongoStore

    assert isinstance(store, MongoStore)
    return int(await store.db.business.count_documents({}))


@asynccontextmanager
async def open_peer(store: Store) -> AsyncIterator[Store]:
    """A second pod's store on the same database: its own client and change stream."""
    from jobledger.storage.mongodb import MongoStore

    assert isinstance(store, MongoStore)
    peer = MongoStore(store.url, partitions=store.partitions, database=store.db.name)
    await peer.open()
    try:
        yield peer
    finally:
        await peer.close()


async def all_jobs(store: Store) -> list[Job]:
    """Every job row, by id."""
    from jobledger.storage.mongodb import MongoStore
    from jobledger.storage.mongodb.builders import job_from_doc

    assert isinstance(store, MongoStore)
    return [job_from_doc(doc) async for doc in store.db.jobs.find({}).sort("_id", 1)]
