"""The worker pods the store knows (the dashboard's "Pods" card, like Sidekiq's
processes and Oban Web's nodes): pods whose heartbeat is recent, the fast-lane
partitions each holds under a live lease, and the targets each has paused (its
heartbeat says them). Three small reads (the workers' liveness rows twice and the
partition lease rows: one per pod and one per partition), never per job."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from jobledger.domain.timeutil import iso
from jobledger.storage.port import Store


async def pods(store: Store, now: datetime, *, live_s: float) -> dict[str, Any]:
    """`{"live_s", "partitions", "pods": [{"pod", "live", "partitions", "paused"}]}`:
    every pod with a heartbeat newer than `live_s` or a lease that has not expired;
    `paused`, the targets a live pod's last heartbeat said it paused (`[{"target",
    "since"}]`, by target), None when it does not say (not live, or an earlier release)."""
    since = now - timedelta(seconds=live_s)
    live = set(await store.coordination.live_workers(since))
    pauses = await store.coordination.live_pauses(since)
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
            {
                "pod": pod,
                "live": pod in live,
                "partitions": held.get(pod, 0),
                "paused": [
                    {"target": target, "since": iso(at)}
                    for target, at in sorted(pauses[pod].items())
                ]
                if pod in pauses
                else None,
            }
            for pod in sorted(live | set(held))
        ],
    }
