"""A private PostgreSQL cluster for tests that stop, restart or break the server.

`PrivateCluster` runs `initdb` into a temporary folder, starts `postgres` on a free
loopback port with trust authentication, and removes everything at `stop()`. Tests
restart *this* server, never the machine's cluster. When the process runs as root the
server runs as the `postgres` user (PostgreSQL refuses to run as root).
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from tests.net import free_port


def pg_bin() -> Path | None:
    """The folder of the newest installed server binaries (initdb, pg_ctl, pg_dump), if
    any: Debian's /usr/lib/postgresql/<version>/bin, else where `pg_ctl` resolves to on
    the PATH (a symlink in /usr/local/bin is followed to its folder)."""
    roots = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))
    if roots and (roots[-1] / "initdb").exists():
        return roots[-1]
    found = shutil.which("pg_ctl")
    return Path(found).resolve().parent if found else None


class PrivateCluster:
    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="jobledger-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.log = self.root / "server.log"
        self._user = "postgres" if os.geteuid() == 0 else None

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str) -> None:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if self._user is not None:
            command = ["runuser", "-u", self._user, "--", *command]
        # the server inherits no pipe of ours (it logs to self.log), so run() returns
        done = subprocess.run(
            command, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {done.stderr.strip() or done.stdout.strip()}")

    def init(self) -> None:
        if self._user is not None:
            entry = pwd.getpwnam(self._user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8")
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"\nport = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.root}'\nmax_connections = 200\n"
                "fsync = off\nfull_page_writes = off\n"
            )

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "30", "start")

    def restart(self) -> None:
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-m",
            "fast",
            "-w",
            "-t",
            "30",
            "restart",
        )

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def remove(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    async def create_database(self, name: str) -> str:
        import psycopg

        conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
        async with conn:
            await conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


@asynccontextmanager
async def private_cluster() -> AsyncIterator[PrivateCluster]:
    """initdb + start on a free port; stopped and removed on exit."""
    bin_dir = pg_bin()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    cluster = PrivateCluster(bin_dir)
    try:
        await asyncio.to_thread(cluster.init)
        await asyncio.to_thread(cluster.start)
        yield cluster
    finally:
        await asyncio.to_thread(cluster.remove)
