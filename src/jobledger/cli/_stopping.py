"""How `jobledger worker` and `jobledger serve` stop: the first SIGINT / SIGTERM starts
the stop (`stop_on_signals`), a timer ends the process if the stop outlives
`stop_timeout_s` (`StopDeadline`), and a second signal during the stop says in one line
what it abandons and exits at once (`abandon`)."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from jobledger.reactors.runtime import stop_on_signals

if TYPE_CHECKING:
    from jobledger.reactors.runtime import InFlight, Runtime

__all__ = ["EXIT_STOP_TIMEOUT", "StopDeadline", "abandon", "abandon_line", "stop_on_signals"]

logger = logging.getLogger("jobledger.worker")

#: exit status of a process whose stop outlived `stop_timeout_s`
EXIT_STOP_TIMEOUT = 1


class StopDeadline:
    """Ends the process `timeout_s` after `arm()` unless `disarm()` came first.

    A timer thread, not a task: it fires even when the event loop is blocked, or when
    `asyncio.run` waits at exit for tasks that ignore their cancellation.
    """

    def __init__(self) -> None:
        self._timer: threading.Timer | None = None

    def arm(self, timeout_s: float) -> None:
        if self._timer is None:
            self._timer = threading.Timer(timeout_s, _exit_late, (timeout_s,))
            self._timer.daemon = True
            self._timer.start()

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def _exit_late(timeout_s: float) -> None:
    logger.error(
        "stop not finished within stop_timeout_s=%gs: exiting now; this pod's partition"
        " and long-lane leases expire and other pods take its rows over",
        timeout_s,
    )
    _exit_now(EXIT_STOP_TIMEOUT)


def _exit_now(status: int) -> None:
    """Flush the logs and the standard streams, then end the process at once."""
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(status)


def abandon_line(flight: InFlight, lease_s: float) -> str:
    """What a second interrupt abandons, in one line: the long-lane rows this pod runs
    (they keep their claims) and its fast-lane partitions in a round."""
    jobs = flight.at_least_once + flight.at_most_once
    whom = (
        "once another pod finds this one gone"
        if flight.tokens
        else f"when their {lease_s:g} s lease ends"
    )
    parts = []
    if flight.at_least_once:
        parts.append(f"{flight.at_least_once} at-least-once will be redelivered {whom}")
    if flight.at_most_once:
        parts.append(
            f"{flight.at_most_once} at-most-once will be judged DEAD then (it may have run)"
        )
    line = f"second interrupt: abandoning {jobs} running job{'' if jobs == 1 else 's'}"
    if parts:
        line += f" ({', '.join(parts)})"
    if flight.fast_rounds:
        line += (
            f"; {flight.fast_rounds} fast-lane partition{'' if flight.fast_rounds == 1 else 's'}"
            " mid-round, judged by their next owner"
        )
    return line + "; exiting now"


def abandon(runtime: Runtime) -> Callable[[int], None]:
    """What a second SIGINT / SIGTERM during the stop does: write `abandon_line` to
    stderr and exit at once with status 128 + the signal's number."""

    def now(signum: int) -> None:
        line = abandon_line(runtime.in_flight(), runtime.engine.settings.long_lease_s)
        with contextlib.suppress(Exception):
            sys.stderr.write(line + "\n")
        _exit_now(128 + signum)

    return now
