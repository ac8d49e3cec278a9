"""Coordination rows of the SQLite store: partition leases and pod liveness (plain
compare-and-set rows, no events; see `reactors.leases`). A pod's liveness token, a file
lock the kernel gives up when the process exits, is in `liveness.py`."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path

from jobledger.domain.timeutil import iso
from jobledger.storage import rows
from jobledger.storage.port import Coordination, PartitionLease
from jobledger.storage.sqlite import sql
from jobledger.storage.sqlite.connections import Connections
from jobledger.storage.sqlite.encode import chunks
from jobledger.storage.sqlite.liveness import SqliteLiveness, advertised, sweep


class SqliteCoordination(Coordination):
    def __init__(self, connections: Connections, tokens: Path | None = None) -> None:
        """`tokens`: the folder of the pods' liveness tokens (None: no tokens, for a
        database that is not a plain file)."""
        self.connections = connections
        self.tokens = tokens
        self._tokens: dict[str, SqliteLiveness] = {}

    def liveness(self, pod: str) -> SqliteLiveness | None:
        if self.tokens is None:
            return None
        token = self._tokens.get(pod)
        if token is None:
            token = self._tokens[pod] = SqliteLiveness(self.connections, self.tokens, pod)
        return token

    async def close(self) -> None:
        """Give up the tokens of this store's pods (the store is closing)."""
        for token in self._tokens.values():
            await token.release()

    def watched(self, pod: str, live: list[str]) -> list[str]:
        """The live pods that have a token file; the files of pods long gone are swept
        away on the way (each heartbeat does it)."""
        if self.tokens is None or not self.tokens.exists():
            return []
        sweep(self.tokens, [*live, pod])
        return advertised(self.tokens, live)

    async def seed_partitions(self, count: int) -> None:
        def work(conn: sqlite3.Connection) -> None:
            conn.executemany(sql.SEED_PARTITION, ((p,) for p in range(count)))

        await self.connections.write(work)

    async def heartbeat(
        self, pod: str, now: datetime, paused: Mapping[str, datetime] | None = None
    ) -> None:
        params = (pod, iso(now), rows.paused_text(paused))
        await self.connections.write(lambda c: c.execute(sql.HEARTBEAT, params))

    async def live_pauses(self, since: datetime) -> dict[str, dict[str, datetime]]:
        found = await self.connections.read(
            lambda c: c.execute(sql.LIVE_PAUSES, (iso(since),)).fetchall()
        )
        return rows.pauses_by_pod(found)

    async def remove_worker(self, pod: str) -> None:
        await self.connections.write(lambda c: c.execute(sql.REMOVE_WORKER, (pod,)))

    async def live_workers(self, since: datetime) -> list[str]:
        return await self.connections.read(
            lambda c: [r[0] for r in c.execute(sql.LIVE_WORKERS, (iso(since),))]
        )

    async def leases(self) -> list[PartitionLease]:
        return await self.connections.read(
            lambda c: [PartitionLease(r[0], r[1], rows.as_utc(r[2])) for r in c.execute(sql.LEASES)]
        )

    async def take_partition(
        self, partition: int, pod: str, now: datetime, until: datetime
    ) -> bool:
        params = (pod, iso(until), partition, pod, iso(now))
        return await self.connections.write(
            lambda c: c.execute(sql.TAKE_PARTITION, params).rowcount == 1
        )

    async def renew_partitions(
        self, pod: str, partitions: Sequence[int], now: datetime, until: datetime
    ) -> list[int]:
        wanted = list(dict.fromkeys(partitions))

        def work(conn: sqlite3.Connection) -> set[int]:
            held: set[int] = set()
            for chunk in chunks(wanted):
                query = sql.renew_partitions_sql(len(chunk))
                held.update(r[0] for r in conn.execute(query, (iso(until), pod, iso(now), *chunk)))
            return held

        held = await self.connections.write(work) if wanted else set()
        return [p for p in partitions if p in held]

    async def release_partitions(self, pod: str, partitions: Sequence[int]) -> None:
        wanted = list(dict.fromkeys(partitions))

        def work(conn: sqlite3.Connection) -> None:
            for chunk in chunks(wanted):
                conn.execute(sql.release_partitions_sql(len(chunk)), (pod, *chunk))

        if wanted:
            await self.connections.write(work)
