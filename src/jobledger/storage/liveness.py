"""Pod liveness tokens: how a pod sees another pod die at once instead of waiting for
that pod's leases to run out (decisions D53-D55).

A store that can tie a token to a process's life hands each pod a `Liveness`
(`Coordination.liveness(pod)`): a token the pod holds while its process lives and that
the database server or the operating system gives up the moment the process dies.

* PostgreSQL: a session-level advisory lock held on a connection of its own; the server
  releases it when the backend ends (the process died, its connection dropped, the
  backend was terminated).
* SQLite: an `flock` on a file of the pod's own in a folder beside the database; the
  kernel releases it when the process exits, however it exits.

A token another pod can take belongs to a pod that is gone, or to one whose token was
taken from it while it lives (its connection dropped). Such a pod notices the loss
(`on_lost`) and sends nothing more until it holds its token again; a takeover happens
only while the token is free (`confirmed`), so a pod that took its token back keeps its
partitions. A pod that is alive and connected but hung keeps its token: its leases,
which it no longer renews, still cover that case.

Stores without such a token (memory, MongoDB) return None: their pods are taken over
when their leases expire.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime

from jobledger.domain.jobs import Job


class Liveness(abc.ABC):
    """One pod's token, and what that pod needs to take over from pods whose token is
    free: watching them, confirming them dead, taking their partitions, finding their
    long-lane claims. Methods are called from one task at a time, except `held`."""

    #: called (from the event loop, once per loss) when the token is gone while this
    #: process lives: the pod must stop sending at once
    on_lost: Callable[[], None] | None = None
    #: how long `hold` waits while this pod's token is held elsewhere before it raises
    #: (s): a pod confirming it free holds it for a moment, a live twin for good
    hold_wait_s: float = 5.0

    @property
    @abc.abstractmethod
    def held(self) -> bool:
        """Whether this pod holds its token now (False before `hold` and after a loss)."""

    @abc.abstractmethod
    async def hold(self) -> None:
        """Take this pod's token (again, after a loss). Waits while another pod holds it
        for a moment (a takeover confirming it free); raises when it cannot be taken
        (the store is unreachable, or another live process runs under this pod id)."""

    @abc.abstractmethod
    async def release(self) -> None:
        """Give the token up for good (a clean stop, after the partitions were released);
        `on_lost` is not called."""

    @abc.abstractmethod
    async def wait_dead(self, pods: Sequence[str]) -> list[str]:
        """Wait until one or more of `pods` (live pods that advertise a token, this one
        excluded) is found without its token; return them. Never returns an empty list:
        with nothing to watch it waits until cancelled, which is how the caller changes
        the set it watches."""

    @abc.abstractmethod
    def confirmed(self, pods: Sequence[str]) -> AbstractAsyncContextManager[list[str]]:
        """The `pods` whose token is free now. Their tokens are held by this pod until
        the block ends, so none of them takes its token back (and resumes sending) while
        the block takes its partitions over. A block that ends without an error marks
        them taken over: they are not advertised any more."""

    @abc.abstractmethod
    async def take_partitions(
        self, dead: Sequence[str], pod: str, now: datetime, until: datetime
    ) -> list[int]:
        """Give `pod` every partition the `dead` pods hold, expired or not, until `until`,
        and delete their liveness rows (they no longer count as live pods); the
        partitions taken. Call it inside `confirmed(dead)`."""

    @abc.abstractmethod
    async def claims_of(self, dead: Sequence[str]) -> list[Job]:
        """The long-lane rows RUNNING under a claim of one of the `dead` pods."""
