"""The SQLite store's liveness tokens (`storage.liveness`; decisions D53, D55).

One machine, so the token is an operating-system lock: each pod holds an exclusive
`flock` on a file of its own in a folder beside the database (`<database>-pods/`, one
`<hash of the pod id>.lock` each, holding the pod id). The kernel releases the lock when
the process exits, however it exits (`kill -9`, an OOM kill), and never while it lives:
so here a token is never lost by a live pod. The file's presence advertises the token;
a file whose lock another pod can take belongs to a dead pod.

A file appears already locked: it is written and locked under a temporary name, then
renamed into place. Watching is a poll of non-blocking `flock` calls on the files of
the live pods (no database statement), every `POLL_S`. The pod that takes a dead pod
over removes its file while it holds that file's lock; files of pods long gone (not
live, lock free) are swept at a beat (`sweep`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import logging
import os
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import datetime
from pathlib import Path

from jobledger.domain.jobs import Job
from jobledger.domain.timeutil import iso
from jobledger.storage.liveness import Liveness
from jobledger.storage.sqlite import sql
from jobledger.storage.sqlite.connections import Connections
from jobledger.storage.sqlite.encode import chunks, decode_job

logger = logging.getLogger("jobledger.storage")

#: seconds between two looks at the watched pods' locks
POLL_S = 0.2
#: a temporary token file older than this whose lock is free was left by a crash (s)
STALE_TMP_S = 60.0


def token_folder(database: str) -> Path | None:
    """Where the pods of the database file `database` keep their tokens; None for a
    database that is not a plain file (`:memory:`, a `file:` URI)."""
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(f"{database}-pods")


def token_path(folder: Path, pod: str) -> Path:
    return folder / f"{hashlib.blake2b(pod.encode(), digest_size=16).hexdigest()}.lock"


def _try_lock(path: Path) -> int | None:
    """An open descriptor of `path` holding its exclusive lock, or None when another
    process (or another descriptor) holds it, or the file is gone or was replaced."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_ino != os.stat(path).st_ino:  # unlinked or replaced meanwhile
            raise FileNotFoundError(path)
    except OSError:
        os.close(fd)
        return None
    return fd


def advertised(folder: Path, pods: Iterable[str]) -> list[str]:
    """Of `pods`, those with a token file."""
    return [pod for pod in pods if token_path(folder, pod).exists()]


def sweep(folder: Path, live: Iterable[str]) -> int:
    """Remove the token files of pods that are not `live` and whose lock is free (pods
    that died with nobody left to take them over), and temporary files left by a crash
    in the middle of `hold`; how many were removed."""
    keep = {token_path(folder, pod).name for pod in live}
    removed = 0
    with contextlib.suppress(FileNotFoundError):
        for path in folder.iterdir():
            stale_tmp = path.suffix == ".tmp" and time.time() - path.stat().st_mtime > STALE_TMP_S
            if path.name in keep or (path.suffix != ".lock" and not stale_tmp):
                continue
            fd = _try_lock(path)
            if fd is not None:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                os.close(fd)
                removed += 1
    return removed


class SqliteLiveness(Liveness):
    def __init__(self, connections: Connections, folder: Path, pod: str) -> None:
        self.connections = connections
        self.folder = folder
        self.pod = pod
        self.path = token_path(folder, pod)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    async def hold(self) -> None:
        if self._fd is not None:
            return
        self.folder.mkdir(exist_ok=True)
        deadline = time.monotonic() + self.hold_wait_s
        while (other := _try_lock(self.path)) is None and self.path.exists():
            if time.monotonic() >= deadline:  # not a takeover's moment: a live process
                raise RuntimeError(
                    f"the liveness token of pod {self.pod} ({self.path}) is locked:"
                    " is another process running as this pod?"
                )
            await asyncio.sleep(POLL_S / 4)
        tmp = self.folder / f".{self.path.stem}.{uuid.uuid4().hex[:8]}.tmp"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.write(fd, self.pod.encode())
            os.replace(tmp, self.path)  # appears locked: never free while this pod lives
        except BaseException:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            raise
        finally:
            if other is not None:  # an earlier life of this pod id: its file is replaced
                os.close(other)
        self._fd = fd

    async def release(self) -> None:
        """Unlock the file and leave it: a pod that takes it over next finds what this
        one left (nothing after a clean stop; the rows of runs a stop cut short)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def _free(self, pods: Sequence[str]) -> list[str]:
        """Of `pods`, those whose token file exists and whose lock is free now."""
        dead = []
        for pod in pods:
            fd = _try_lock(token_path(self.folder, pod))
            if fd is not None:
                os.close(fd)
                dead.append(pod)
        return dead

    async def wait_dead(self, pods: Sequence[str]) -> list[str]:
        others = [pod for pod in pods if pod != self.pod]
        while True:
            dead = self._free(others)
            if dead:
                return dead
            await asyncio.sleep(POLL_S)

    @contextlib.asynccontextmanager
    async def confirmed(self, pods: Sequence[str]) -> AsyncIterator[list[str]]:
        held: dict[str, int] = {}
        try:
            for pod in pods:
                fd = _try_lock(token_path(self.folder, pod)) if pod != self.pod else None
                if fd is not None:
                    held[pod] = fd
            yield list(held)
            for pod in held:  # taken over: no longer advertised
                with contextlib.suppress(FileNotFoundError):
                    token_path(self.folder, pod).unlink()
        finally:
            for fd in held.values():
                os.close(fd)

    async def take_partitions(
        self, dead: Sequence[str], pod: str, now: datetime, until: datetime
    ) -> list[int]:
        pods = list(dict.fromkeys(dead))

        def work(conn: sqlite3.Connection) -> list[int]:
            taken: list[int] = []
            for chunk in chunks(pods):
                conn.execute(sql.remove_workers_sql(len(chunk)), chunk)
                query = sql.take_dead_sql(len(chunk))
                taken += [r[0] for r in conn.execute(query, (pod, iso(until), *chunk))]
            return sorted(taken)

        return await self.connections.write(work) if pods else []

    async def claims_of(self, dead: Sequence[str]) -> list[Job]:
        pods = list(dict.fromkeys(dead))

        def work(conn: sqlite3.Connection) -> list[Job]:
            found: list[Job] = []
            for chunk in chunks(pods):
                found += [decode_job(r) for r in conn.execute(sql.claims_of_sql(len(chunk)), chunk)]
            return found

        return await self.connections.read(work) if pods else []
