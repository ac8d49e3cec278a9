"""What a target declares about its runs (`@app.target(retry=..., timeout_s=...)`), pure.

* `retry`: the waits between its failed runs. An explicit list of delays becomes
  `RetryDelays` (one run more than delays: `[5, 10]` is three runs, then DEAD); a
  `Backoff` grows them (`base_s * factor^(n-1)`, at most `max_s`, less a jitter share
  drawn from the job's id). `retry_policy` reads what the caller gave, or refuses it.
* `timeout_s`: how long one run may take (`check_timeout`), and whether that fits the
  lease its lane runs under (`timeout_refusal`): a run must be over before another pod
  may take its row.

Delays are whole milliseconds, the precision every store keeps (`domain.timeutil`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from jobledger.domain.errors import InvalidArgument
from jobledger.domain.jobs import Lane
from jobledger.domain.policies import SEND_MARGIN_SHARE

#: the longest wait a retry may ask for: a year keeps `next_run_at` far from datetime's end
MAX_DELAY_S = 365 * 86_400.0


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _seconds(what: str, value: object) -> float:
    """`value` (seconds, or a timedelta) as a finite number of seconds in [0, a year]."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif _number(value):
        seconds = float(value)  # type: ignore[arg-type]
    else:
        raise InvalidArgument(f"{what} must be seconds or a timedelta, not {type(value).__name__}")
    if not math.isfinite(seconds) or seconds < 0 or seconds > MAX_DELAY_S:
        raise InvalidArgument(f"{what} must be between 0 and {MAX_DELAY_S:g} s, not {value!r}")
    return seconds


def _whole_ms(seconds: float) -> timedelta:
    return timedelta(milliseconds=round(seconds * 1000))


@dataclass(frozen=True, slots=True)
class RetryDelays:
    """Fixed waits: after the n-th failed run, `seconds[n-1]` (the last one repeats when
    a per-code maximum allows more runs than the list has delays)."""

    seconds: tuple[float, ...]

    @property
    def attempts(self) -> int:
        """Runs before DEAD: the first one and one after each delay."""
        return len(self.seconds) + 1

    def delay(self, failures: int, job_id: str) -> timedelta:
        """The wait once `failures` failed runs were recorded (1 = the first)."""
        index = min(max(failures, 1), len(self.seconds)) - 1
        return _whole_ms(self.seconds[index])

    @classmethod
    def of_minutes(cls, minutes: Sequence[float]) -> RetryDelays:
        return cls(tuple(m * 60.0 for m in minutes))


@dataclass(frozen=True, slots=True)
class Backoff:
    """Growing waits between a target's failed runs.

    After the n-th failed run the wait is `base_s * factor^(n-1)`, at most `max_s`; with
    `jitter` (0 to 1) a share of it, up to `jitter`, is taken off, so many jobs that
    failed together do not come back together. The share is drawn from the job's id and
    n, never from a random generator: the same job waits the same on every pod, under a
    fake clock and when the log is replayed. A wait is never negative and never more
    than `max_s`. `attempts` is the number of runs before DEAD (None: the
    `max_attempts` setting; a per-code maximum wins over both). `base_s` and `max_s`
    may be given as timedeltas too.

        @app.target("mail:welcome", retry=Backoff(base_s=10, factor=3, max_s=600, jitter=0.2))
    """

    base_s: float
    factor: float = 2.0
    max_s: float = 3600.0
    jitter: float = 0.0
    attempts: int | None = None

    def __post_init__(self) -> None:
        base = _seconds("Backoff base_s", self.base_s)
        if 0 < base < 0.001:
            raise InvalidArgument(f"Backoff base_s must be 0 or at least 0.001 s, not {base!r}")
        top = _seconds("Backoff max_s", self.max_s)
        if top < base:
            raise InvalidArgument(f"Backoff max_s ({top:g}) must not be below base_s ({base:g})")
        if not _number(self.factor) or not 1 <= self.factor <= 1000:
            raise InvalidArgument(
                f"Backoff factor must be a number from 1 to 1000, not {self.factor!r}"
            )
        if not _number(self.jitter) or not 0 <= self.jitter <= 1:
            raise InvalidArgument(
                f"Backoff jitter must be a share from 0 to 1, not {self.jitter!r}"
            )
        if self.attempts is not None and (
            not isinstance(self.attempts, int)
            or isinstance(self.attempts, bool)
            or self.attempts < 1
        ):
            raise InvalidArgument(f"Backoff attempts must be at least 1, not {self.attempts!r}")
        # kept as plain seconds (a timedelta given is converted), so the math stays float
        object.__setattr__(self, "base_s", base)
        object.__setattr__(self, "max_s", top)

    def delay(self, failures: int, job_id: str) -> timedelta:
        """The wait once `failures` failed runs of job `job_id` were recorded."""
        n = max(failures, 1)
        wait = self.grown_s(n)
        if self.jitter:
            wait *= 1.0 - self.jitter * jitter_share(job_id, n)
        # whole milliseconds, never above max_s (its own whole milliseconds), never below 0
        top_ms = math.floor(round(self.max_s * 1000, 6))
        return timedelta(milliseconds=min(round(wait * 1000), top_ms))

    def grown_s(self, n: int) -> float:
        """`base_s * factor^(n-1)` capped at `max_s`, without overflowing for a large n
        (below the cap, factor^(n-1) < max_s / base_s, at most a year over a millisecond)."""
        base, factor, top = float(self.base_s), float(self.factor), float(self.max_s)
        if base == 0 or factor == 1:
            return base
        if n - 1 >= math.log(top / base, factor):  # factor^(n-1) reaches the cap
            return top
        return min(base * factor ** (n - 1), top)


RetryPolicy = RetryDelays | Backoff


def jitter_share(job_id: str, failures: int) -> float:
    """A share in [0, 1) fixed by the job's id and its count of failed runs."""
    digest = hashlib.blake2b(f"{job_id}:{failures}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def retry_policy(target: str, retry: object) -> RetryPolicy | None:
    """What `@app.target(retry=...)` gave, as a policy (None: the default delays), or
    InvalidArgument in one line naming the target: a list (or tuple) of delays, each
    seconds or a timedelta, or a `Backoff`."""
    if retry is None or isinstance(retry, RetryDelays | Backoff):
        return retry
    if not isinstance(retry, list | tuple):
        raise InvalidArgument(
            f"target {target!r}: retry must be a list of delays or a Backoff,"
            f" not {type(retry).__name__}"
        )
    if not retry:
        raise InvalidArgument(f"target {target!r}: retry needs at least one delay")
    try:
        return RetryDelays(tuple(_seconds("a retry delay", item) for item in retry))
    except InvalidArgument as exc:
        raise InvalidArgument(f"target {target!r}: {exc.message}") from None


def check_timeout(target: str, timeout_s: object) -> float | None:
    """`timeout_s` as seconds (None: no timeout), or InvalidArgument naming the target."""
    if timeout_s is None:
        return None
    if isinstance(timeout_s, timedelta):
        timeout_s = timeout_s.total_seconds()
    if not _number(timeout_s) or not 0 < timeout_s < math.inf:  # type: ignore[operator]
        raise InvalidArgument(
            f"target {target!r}: timeout_s must be a positive number of seconds, not {timeout_s!r}"
        )
    return float(timeout_s)  # type: ignore[arg-type]


def lease_room_s(lane: Lane, partition_lease_s: float, long_lease_s: float) -> float:
    """The least of its lease a run of `lane` may find left when it starts, were the
    lease never renewed again: a fast-lane send starts only while its partition's lease
    has more than its safety margin left (`policies.send_deadline`); a long-lane run
    starts just after its claim, with the whole `long_lease_s`."""
    if lane == Lane.FAST:
        return partition_lease_s * SEND_MARGIN_SHARE
    return long_lease_s


def timeout_refusal(
    target: str, lane: Lane, timeout_s: float, partition_lease_s: float, long_lease_s: float
) -> str | None:
    """Why `timeout_s` does not fit `target`'s lane (one line), or None when it does: a
    timed-out run must be over before its lease could lapse and another pod take its
    row, so the timeout must be shorter than `lease_room_s`."""
    room = lease_room_s(lane, partition_lease_s, long_lease_s)
    if timeout_s < room:
        return None
    if lane == Lane.FAST:
        lease = (
            f"the {room:g} s a fast-lane send may start with"
            f" (partition_lease_s={partition_lease_s:g} * {SEND_MARGIN_SHARE:g})"
        )
    else:
        lease = f"the long-lane claim lease (long_lease_s={long_lease_s:g})"
    return (
        f"target {target!r}: timeout_s={timeout_s:g} cannot finish within {lease};"
        " shorten the timeout or lengthen the lease"
    )
