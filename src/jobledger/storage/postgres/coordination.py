"""Coordination rows of the PostgreSQL store: partition leases and pod liveness (plain
compare-and-set rows, no events; see `reactors.leases`). A heartbeat and a takeover are
one statement each (`beat`, `take_partitions`). A pod's liveness token, which the server
gives up the moment the pod's session ends, is in `liveness.py`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from jobledger.storage.port import Beat, Coordination, PartitionLease
from jobledger.storage.postgres.connections import PgConnections
from jobledger.storage.postgres.liveness import PgLiveness
from jobledger.storage.postgres.sql import Statements
from jobledger.storage.rows import as_utc, paused_text, pauses_by_pod


class PgCoordination(Coordination):
    def __init__(self, connections: PgConnections, sql: Statements) -> None:
        self.connections = connections
        self.sql = sql
        self._tokens: dict[str, PgLiveness] = {}

    def liveness(self, pod: str) -> PgLiveness:
        token = self._tokens.get(pod)
        if token is None:
            token = self._tokens[pod] = PgLiveness(self.connections, self.sql, pod)
        return token

    async def close(self) -> None:
        """Give up the tokens of this store's pods (the store is closing)."""
        for token in self._tokens.values():
            await token.release()

    async def seed_partitions(self, count: int) -> None:
        await self.connections.execute(self.sql.seed_partitions, (count,))

    async def heartbeat(
        self, pod: str, now: datetime, paused: Mapping[str, datetime] | None = None
    ) -> None:
        await self.connections.execute(self.sql.heartbeat, (pod, now, paused_text(paused)))

    async def live_pauses(self, since: datetime) -> dict[str, dict[str, datetime]]:
        return pauses_by_pod(await self.connections.tuples(self.sql.live_pauses, (since,)))

    async def remove_worker(self, pod: str) -> None:
        await self.connections.execute(self.sql.remove_worker, (pod,))

    async def live_workers(self, since: datetime) -> list[str]:
        rows = await self.connections.rows(self.sql.live_workers, (since,))
        return [r["pod"] for r in rows]

    async def leases(self) -> list[PartitionLease]:
        rows = await self.connections.rows(self.sql.leases)
        return [PartitionLease(r["partition"], r["owner"], as_utc(r["lease_until"])) for r in rows]

    async def take_partition(
        self, partition: int, pod: str, now: datetime, until: datetime
    ) -> bool:
        taken = await self.connections.execute(
            self.sql.take_partition, {"pod": pod, "until": until, "p": partition, "now": now}
        )
        return taken == 1

    async def renew_partitions(
        self, pod: str, partitions: Sequence[int], now: datetime, until: datetime
    ) -> list[int]:
        rows = await self.connections.rows(
            self.sql.renew_partitions,
            {"pod": pod, "until": until, "parts": list(partitions), "now": now},
        )
        held = {r["partition"] for r in rows}
        return [p for p in partitions if p in held]

    async def release_partitions(self, pod: str, partitions: Sequence[int]) -> None:
        await self.connections.execute(self.sql.release_partitions, (pod, list(partitions)))

    async def beat(
        self,
        pod: str,
        now: datetime,
        renew: Sequence[int],
        until: datetime,
        live_since: datetime,
        paused: Mapping[str, datetime] | None = None,
    ) -> Beat:
        """Liveness (with the paused targets), renewals, live pods and the lease rows in
        one statement; the heartbeat says whether `pod` holds its liveness token now."""
        token = self._tokens.get(pod)
        rows = await self.connections.tuples(
            self.sql.beat,
            {
                "pod": pod,
                "now": now,
                "until": until,
                "renew": list(renew),
                "since": live_since,
                "token": token is not None and token.held,
                "paused": paused_text(paused),
            },
        )
        held = {r[0] for r in rows if r[3]}
        live = list(rows[0][4]) if rows else await self.live_workers(live_since)
        watched = list(rows[0][6]) if rows else []
        leases = [PartitionLease(r[0], r[1], as_utc(r[2])) for r in rows]
        return Beat([p for p in renew if p in held], live, leases, watched)

    async def take_partitions(
        self, partitions: Sequence[int], pod: str, now: datetime, until: datetime
    ) -> list[int]:
        """One statement; rows another pod is taking at this moment are skipped."""
        rows = await self.connections.tuples(
            self.sql.take_partitions,
            {"parts": list(partitions), "pod": pod, "now": now, "until": until},
        )
        taken = {r[0] for r in rows}
        return [p for p in partitions if p in taken]
