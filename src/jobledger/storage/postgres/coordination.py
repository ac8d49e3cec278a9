"""Coordination rows of the PostgreSQL store: partition leases and pod liveness (plain
compare-and-set rows, no events; see `reactors.leases`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from jobledger.storage.port import PartitionLease
from jobledger.storage.postgres.base import PgBase
from jobledger.storage.rows import as_utc


class Coordination(PgBase):
    # --- coordination --------------------------------------------------------------------
    async def seed_partitions(self, count: int) -> None:
        # the primary key makes duplicates impossible; racing seeders insert each row once
        await self._exec(
            f"INSERT INTO {self.s}.partitions (partition) SELECT generate_series(0, %s - 1)"
            " ON CONFLICT DO NOTHING",
            (count,),
        )

    async def heartbeat(self, pod: str, now: datetime) -> None:
        await self._exec(
            f"INSERT INTO {self.s}.workers (pod, heartbeat_at) VALUES (%s, %s)"
            " ON CONFLICT (pod) DO UPDATE SET heartbeat_at = excluded.heartbeat_at",
            (pod, now),
        )

    async def remove_worker(self, pod: str) -> None:
        await self._exec(f"DELETE FROM {self.s}.workers WHERE pod = %s", (pod,))

    async def live_workers(self, since: datetime) -> list[str]:
        rows = await self._rows(
            f"SELECT pod FROM {self.s}.workers WHERE heartbeat_at > %s ORDER BY pod", (since,)
        )
        return [r["pod"] for r in rows]

    async def leases(self) -> list[PartitionLease]:
        rows = await self._rows(
            f"SELECT partition, owner, lease_until FROM {self.s}.partitions ORDER BY partition"
        )
        return [PartitionLease(r["partition"], r["owner"], as_utc(r["lease_until"])) for r in rows]

    async def take_partition(
        self, partition: int, pod: str, now: datetime, until: datetime
    ) -> bool:
        taken = await self._exec(
            f"UPDATE {self.s}.partitions SET owner = %(pod)s, lease_until = %(until)s"
            " WHERE partition = %(p)s"
            " AND (owner IS NULL OR owner = %(pod)s OR lease_until <= %(now)s)",
            {"pod": pod, "until": until, "p": partition, "now": now},
        )
        return taken == 1

    async def renew_partitions(
        self, pod: str, partitions: Sequence[int], now: datetime, until: datetime
    ) -> list[int]:
        rows = await self._rows(
            f"UPDATE {self.s}.partitions SET lease_until = %(until)s"
            " WHERE owner = %(pod)s AND partition = ANY(%(parts)s) AND lease_until > %(now)s"
            " RETURNING partition",
            {"pod": pod, "until": until, "parts": list(partitions), "now": now},
        )
        held = {r["partition"] for r in rows}
        return [p for p in partitions if p in held]

    async def release_partitions(self, pod: str, partitions: Sequence[int]) -> None:
        await self._exec(
            f"UPDATE {self.s}.partitions SET owner = NULL, lease_until = NULL"
            " WHERE owner = %s AND partition = ANY(%s)",
            (pod, list(partitions)),
        )
