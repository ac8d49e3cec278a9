"""Coordination rows of the PostgreSQL store: partition leases and pod liveness (plain
compare-and-set rows, no events; see `reactors.leases`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from jobledger.storage.port import Beat, PartitionLease
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

    # --- one statement per heartbeat and per takeover ------------------------------------
    async def beat(
        self,
        pod: str,
        now: datetime,
        renew: Sequence[int],
        until: datetime,
        live_since: datetime,
    ) -> Beat:
        """Liveness, renewals, live pods and the lease rows in one statement: the data-
        modifying CTEs run once; the lease rows are read with the renewals applied (a
        statement does not see its own CTEs' writes, so they are joined in)."""
        rows = await self._tuples(
            f"""
WITH hb AS (
  INSERT INTO {self.s}.workers (pod, heartbeat_at) VALUES (%(pod)s, %(now)s)
  ON CONFLICT (pod) DO UPDATE SET heartbeat_at = excluded.heartbeat_at RETURNING pod
), renewed AS (
  UPDATE {self.s}.partitions SET lease_until = %(until)s
  WHERE owner = %(pod)s AND partition = ANY(%(renew)s) AND lease_until > %(now)s
  RETURNING partition, owner, lease_until
)
SELECT p.partition, coalesce(r.owner, p.owner), coalesce(r.lease_until, p.lease_until),
       r.partition IS NOT NULL,
       (SELECT coalesce(array_agg(w.pod ORDER BY w.pod), '{{}}') FROM {self.s}.workers w
        WHERE w.heartbeat_at > %(since)s),
       (SELECT count(*) FROM hb)
FROM {self.s}.partitions p LEFT JOIN renewed r USING (partition)
ORDER BY p.partition""",
            {"pod": pod, "now": now, "until": until, "renew": list(renew), "since": live_since},
        )
        held = {r[0] for r in rows if r[3]}
        live = list(rows[0][4]) if rows else await self.live_workers(live_since)
        leases = [PartitionLease(r[0], r[1], as_utc(r[2])) for r in rows]
        return Beat([p for p in renew if p in held], live, leases)

    async def take_partitions(
        self, partitions: Sequence[int], pod: str, now: datetime, until: datetime
    ) -> list[int]:
        """One statement. Rows another pod is updating right now are skipped, not waited
        for (`SKIP LOCKED`), so two pods taking overlapping sets never deadlock; a row
        locked here is re-checked at its latest version before it is taken."""
        rows = await self._tuples(
            f"""
WITH free AS (
  SELECT partition FROM {self.s}.partitions
  WHERE partition = ANY(%(parts)s)
    AND (owner IS NULL OR owner = %(pod)s OR lease_until <= %(now)s)
  ORDER BY partition FOR UPDATE SKIP LOCKED
)
UPDATE {self.s}.partitions p SET owner = %(pod)s, lease_until = %(until)s
FROM free WHERE p.partition = free.partition RETURNING p.partition""",
            {"parts": list(partitions), "pod": pod, "now": now, "until": until},
        )
        taken = {r[0] for r in rows}
        return [p for p in partitions if p in taken]
