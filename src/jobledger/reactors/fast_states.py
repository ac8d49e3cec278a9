"""A partition worker's state, kept and changed in one place.

`WorkerState` names where a worker is and `MOVES` lists every move it may make
(docs/lanes.md draws them). `WorkerStatus` holds one worker's current state for its
loop (`fast_worker`) and its rounds (`fast_round`), together with the partition's lease
as this pod sees it: once the lease is within its safety margin, the worker is LOST.
"""

from __future__ import annotations

import enum
import logging
from datetime import datetime

from jobledger.core.clock import Clock
from jobledger.domain.policies import send_deadline
from jobledger.reactors.states import Moves

logger = logging.getLogger("jobledger.fast_lane")


class WorkerState(enum.Enum):
    IDLE = "idle"  # waiting for a wake-up, a held retry's timer or a probe's
    READING = "reading"  # in a pass: reading a page, planning the next round
    IN_ROUND = "in round"  # marking, sending, writing outcomes: the partition is busy
    RECOVERING = "recovering"  # a round failed: backing off, then writing what it decided
    STOPPING = "stopping"  # asked to stop: sends the row it already marked, then ends
    STOPPED = "stopped"
    LOST = "lost"  # the lease is gone (or ends soon): sends nothing more, then ends

    # members are singletons compared by identity: hashing them by identity keeps the
    # checked moves of every round off Enum's hash of the member's name
    __hash__ = object.__hash__


IDLE, READING, IN_ROUND = WorkerState.IDLE, WorkerState.READING, WorkerState.IN_ROUND
RECOVERING, STOPPING = WorkerState.RECOVERING, WorkerState.STOPPING
STOPPED, LOST = WorkerState.STOPPED, WorkerState.LOST

#: every move of a partition worker. STOPPING and LOST are asked for from outside
#: (`PartitionWorker.stop`, the lease keeper) or found by the worker itself (a refused
#: mark, its send deadline); a round under way then ends without leaving them
MOVES = Moves(
    {
        IDLE: {READING, IN_ROUND, RECOVERING, STOPPING, LOST},
        READING: {IN_ROUND, IDLE, RECOVERING, STOPPING, LOST},
        IN_ROUND: {READING, RECOVERING, STOPPING, LOST},
        RECOVERING: {READING, STOPPING, LOST},
        STOPPING: {STOPPED, LOST},
        STOPPED: set(),
        LOST: set(),
    },
    work={IDLE, READING, IN_ROUND, RECOVERING},
)


class WorkerStatus:
    """Where one partition worker is, and until when it may start a send."""

    def __init__(
        self, partition: int, lease_until: datetime, lease_s: float, clock: Clock, pod: str
    ) -> None:
        self.partition = partition
        self.state = IDLE
        #: stopping, stopped or lost: the worker takes no new work (kept by `enter`)
        self.ending = False
        self._lease_s = lease_s
        self._clock = clock
        self._pod = pod
        self.lease_until = lease_until

    def enter(self, state: WorkerState) -> None:
        if state is not self.state:
            self.state = MOVES.move(self.state, state, self)
            self.ending = self.state not in MOVES.work

    def __str__(self) -> str:
        return f"partition {self.partition}"

    @property
    def lease_until(self) -> datetime:
        """The partition's lease as this pod last renewed it (its own clock)."""
        return self._lease_until

    @lease_until.setter
    def lease_until(self, until: datetime) -> None:
        self._lease_until = until
        self._send_deadline = send_deadline(until, self._lease_s)

    def may_send(self, now: datetime | None = None) -> bool:
        """Whether a send may start now: the lease, by this pod's clock, has more than
        its safety margin left (`policies.send_deadline`). Past it, the worker is LOST:
        it sends no further row of the partition (the heartbeat starts a fresh worker if
        the store renewed the lease after all). `now`: the clock read just before, if
        the caller has one."""
        if self.state is LOST:
            return False
        if (self._clock.now() if now is None else now) < self._send_deadline:
            return True
        self.enter(LOST)
        logger.warning(
            "partition %d: lease of %s ends at %s; no further send",
            self.partition,
            self._pod,
            self._lease_until,
        )
        return False
