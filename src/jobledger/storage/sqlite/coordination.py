"""Coordination rows of the SQLite store: partition leases and pod liveness (plain
compare-and-set rows, no events; see `reactors.leases`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime

from jobledger.domain.timeutil import iso
from jobledger.storage import rows
from jobledger.storage.port import PartitionLease
from jobledger.storage.sqlite.base import SqliteBase
from jobledger.storage.sqlite.encode import chunks


class Coordination(SqliteBase):
    # --- coordination -------------------------------------------------------------------------
    async def seed_partitions(self, count: int) -> None:
        def work(conn: sqlite3.Connection) -> None:
            conn.executemany(
                'INSERT OR IGNORE INTO partitions ("partition") VALUES (?)',
                ((p,) for p in range(count)),
            )

        await self._write(work)

    async def heartbeat(self, pod: str, now: datetime) -> None:
        sql = (
            "INSERT INTO workers (pod, heartbeat_at) VALUES (?, ?)"
            " ON CONFLICT (pod) DO UPDATE SET heartbeat_at = excluded.heartbeat_at"
        )
        await self._write(lambda c: c.execute(sql, (pod, iso(now))))

    async def remove_worker(self, pod: str) -> None:
        await self._write(lambda c: c.execute("DELETE FROM workers WHERE pod = ?", (pod,)))

    async def live_workers(self, since: datetime) -> list[str]:
        sql = "SELECT pod FROM workers WHERE heartbeat_at > ? ORDER BY pod"
        return await self._read(lambda c: [r[0] for r in c.execute(sql, (iso(since),))])

    async def leases(self) -> list[PartitionLease]:
        sql = 'SELECT "partition", owner, lease_until FROM partitions ORDER BY "partition"'
        return await self._read(
            lambda c: [PartitionLease(r[0], r[1], rows.as_utc(r[2])) for r in c.execute(sql)]
        )

    async def take_partition(
        self, partition: int, pod: str, now: datetime, until: datetime
    ) -> bool:
        sql = (
            'UPDATE partitions SET owner = ?, lease_until = ? WHERE "partition" = ?'
            " AND (owner IS NULL OR owner = ? OR lease_until <= ?)"
        )
        params = (pod, iso(until), partition, pod, iso(now))
        return await self._write(lambda c: c.execute(sql, params).rowcount == 1)

    async def renew_partitions(
        self, pod: str, partitions: Sequence[int], now: datetime, until: datetime
    ) -> list[int]:
        wanted = list(dict.fromkeys(partitions))

        def work(conn: sqlite3.Connection) -> set[int]:
            held: set[int] = set()
            for chunk in chunks(wanted):
                sql = (
                    "UPDATE partitions SET lease_until = ? WHERE owner = ? AND lease_until > ?"
                    f' AND "partition" IN ({", ".join("?" for _ in chunk)}) RETURNING "partition"'
                )
                held.update(r[0] for r in conn.execute(sql, (iso(until), pod, iso(now), *chunk)))
            return held

        held = await self._write(work) if wanted else set()
        return [p for p in partitions if p in held]

    async def release_partitions(self, pod: str, partitions: Sequence[int]) -> None:
        wanted = list(dict.fromkeys(partitions))

        def work(conn: sqlite3.Connection) -> None:
            for chunk in chunks(wanted):
                conn.execute(
                    "UPDATE partitions SET owner = NULL, lease_until = NULL WHERE owner = ?"
                    f' AND "partition" IN ({", ".join("?" for _ in chunk)})',
                    (pod, *chunk),
                )

        if wanted:
            await self._write(work)
