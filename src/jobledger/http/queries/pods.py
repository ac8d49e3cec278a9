"""The worker pods the store knows (the dashboard's "Pods" card, like Sidekiq's
processes and Oban Web's nodes): pods whose heartbeat is recent, and the fast-lane
partitions each holds under a live lease. Two small reads (the workers' liveness rows
and the partition lease rows: one per pod and one per partition), never per job."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from jobledger.storage.port import Store


async def pods(store: Store, now: datetime, *, live_s: float) -> dict[str, Any]:
    """`{"live_s", "partitions", "pods": [{"pod", "live", "partitions"}]}`: every pod
    with a heartbeat newer than `live_s` or a lease that has not expired."""
    live = set(await store.coordination.live_workers(now - timedelta(seconds=live_s)))
    leases = await store.coordination.leases()
    held = Counter(
        lease.owner
        for lease in leases
        if lease.owner is not None and lease.lease_until is not None and lease.lease_until > now
    )
    return {
        "live_s": live_s,
        "partitions": len(leases),
        "pods": [
            {"pod": pod, "live": pod in live, "partitions": held.get(pod, 0)}
            for pod in sorted(live | set(held))
        ],
    }
