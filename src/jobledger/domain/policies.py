"""Small pure policies of the reference: partition hash, backoff, the lease share target, and
the last moment a partition owner may start a send."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from datetime import datetime, timedelta

PARTITIONS = 64
RETRY_DELAYS_MINUTES: tuple[float, ...] = (1, 2, 4, 8, 16)
DEFAULT_MAX_ATTEMPTS = len(RETRY_DELAYS_MINUTES) + 1  # the 6th answered failure is DEAD
#: share of the partition lease kept back as a safety margin: no send starts later than
#: lease_until - margin by the pod's own clock (7.5 s of a 30 s lease, 0.5 s of a 2 s one)
SEND_MARGIN_SHARE = 0.25


def partition_of(key: str | None, dedupe_key: str, partitions: int = PARTITIONS) -> int:
    """md5(key, or dedupe_key when key is absent) mod `partitions`.

    The first four bytes of the digest, read big-endian, as the reference's
    `parseInt(md5hex.slice(0, 8), 16) % 64` (= `digest.readUInt32BE(0) % 64`), so a
    migrated deployment keeps every key in the partition it had.
    """
    text = key if key else dedupe_key
    digest = hashlib.md5(text.encode("utf-8"), usedforsecurity=False).digest()
    return int.from_bytes(digest[:4], "big") % partitions


def retry_delay(
    attempts_after_failure: int,
    delays_minutes: Sequence[float] = RETRY_DELAYS_MINUTES,
) -> timedelta:
    """Wait before the next run once `attempts_after_failure` failures were answered.

    1 → 1 min, 2 → 2 min, … 5 → 16 min; beyond the table the last delay repeats.
    """
    index = min(max(attempts_after_failure, 1), len(delays_minutes)) - 1
    return timedelta(minutes=delays_minutes[index])


def share_target(
    live_pods: int, owned_counts: Sequence[int], mine: int, partitions: int = PARTITIONS
) -> int:
    """How many partitions this pod should hold now (at each lease heartbeat).

    The fair share is ceil(P / live pods); while another live pod holds fewer than
    floor(P / live pods) this pod yields down to max(floor, 1) so that the newcomer
    can take its part.
    """
    pods = max(live_pods, 1)
    ceiling = math.ceil(partitions / pods)
    floor = partitions // pods
    others_below_floor = any(count < floor for count in owned_counts)
    if others_below_floor and mine > floor:
        return max(floor, 1)
    return ceiling


def send_deadline(lease_until: datetime, lease_s: float) -> datetime:
    """The last moment (on the pod's clock) a send of the partition may start.

    `lease_until` is the pod's own reading: the time it sent the renewal plus the lease,
    so it is never later than what the store granted. The margin covers a send already
    started, the outcome commit that follows it, and clock skew between pods; a pod past
    it sends no further row of that partition: a pod that lost its lease between rows
    sends nothing more.
    """
    return lease_until - timedelta(seconds=lease_s * SEND_MARGIN_SHARE)


#: how long a pod whose liveness token is free keeps its partitions before another pod
#: takes them (s): a live pod whose token was taken notices within milliseconds and
#: sends nothing more; a dead one loses half a second
DEATH_GRACE_S = 0.5


def death_grace_s(lease_s: float) -> float:
    """`DEATH_GRACE_S`, or an eighth of a shorter lease (0.25 s of the tests' 2 s)."""
    return min(DEATH_GRACE_S, lease_s / 8)
