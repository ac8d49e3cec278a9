"""The in-process target registry: target name → lane, handler, delivery mode, and its
runs' policy (retry delays, timeout).

A handler is an `async def` (or an object with an `async def __call__`). A plain `def`
is accepted too and runs in a worker thread (`asyncio.to_thread`), so a blocking call
(an HTTP client, an SMTP library) does not stall the lanes' event loop — and a plain
function no longer "runs, then fails on `await None`" and repeats its side effect.

A target with `timeout_s` gets its handler wrapped by `with_timeout` once the registry
is bound to its engine's clock and leases (`bind`): a target without one is called as
it is, with no timeout machinery on its path.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from jobledger.core.clock import Clock, SystemClock
from jobledger.domain.enqueue_rules import check_text
from jobledger.domain.errors import (
    ConfigError,
    DuplicateTarget,
    InvalidArgument,
    RunTimedOut,
    UnknownTarget,
)
from jobledger.domain.jobs import DeliveryMode, Job, Lane
from jobledger.domain.policies import DEFAULT_MAX_ATTEMPTS
from jobledger.domain.run_policy import RetryPolicy, check_timeout, retry_policy, timeout_refusal

Handler = Callable[[Job], Awaitable[object]]


def is_async_handler(handler: Callable[..., Any]) -> bool:
    """An `async def`, a partial of one, or an object whose `__call__` is one."""
    while isinstance(handler, functools.partial):
        handler = handler.func
    if inspect.iscoroutinefunction(handler):
        return True
    if inspect.isfunction(handler) or inspect.ismethod(handler):
        return False
    return inspect.iscoroutinefunction(type(handler).__call__)


def as_async(handler: Callable[[Job], Any]) -> Handler:
    """`handler` itself when it is async; a plain `def` wrapped to run in a thread (an
    awaitable it returns is awaited on the loop)."""
    if is_async_handler(handler):
        return handler

    @functools.wraps(handler)
    async def in_thread(job: Job) -> object:
        result = await asyncio.to_thread(handler, job)
        if inspect.isawaitable(result):
            return await result
        return result

    return in_thread


def with_timeout(handler: Handler, target: str, timeout_s: float, clock: Clock) -> Handler:
    """`handler` stopped after `timeout_s` on `clock`, raising `RunTimedOut` instead.

    An `async def` handler is cancelled at the await it is in. A plain `def` runs in a
    thread, which Python cannot stop: the run stops being waited for and is recorded as
    timed out while its thread goes on to the end of the function, side effects
    included. A `TimeoutError` the handler raises itself is left as it is. With the
    system clock this is `asyncio.timeout`; with another clock (a `FakeClock`) the
    timeout fires when that clock reaches it."""
    on_loop = type(clock) is SystemClock  # the loop's own timer; another clock sets an alarm

    @functools.wraps(handler)
    async def timed(job: Job) -> object:
        scope = asyncio.timeout(timeout_s if on_loop else None)
        try:
            async with scope:
                if on_loop:
                    return await handler(job)
                # the deadline is fixed now: a clock that moves before the alarm's task
                # first runs must not push the timeout back by the size of the jump
                deadline = clock.now() + timedelta(seconds=timeout_s)
                alarm = asyncio.ensure_future(_expire(scope, clock, deadline))
                try:
                    return await handler(job)
                finally:
                    alarm.cancel()  # before the scope ends: it never fires after
        except TimeoutError:
            if scope.expired():
                raise RunTimedOut(target, timeout_s) from None
            raise

    return timed


async def _expire(scope: asyncio.Timeout, clock: Clock, deadline: datetime) -> None:
    await clock.sleep(max((deadline - clock.now()).total_seconds(), 0.0))
    scope.reschedule(asyncio.get_running_loop().time())


@dataclass(frozen=True, slots=True)
class Target:
    """A registered target. `handler` is what the lanes call (with its timeout, once the
    registry is bound); `retry` None means the settings' delays; `timeout_s` None, no
    timeout."""

    name: str
    lane: Lane
    handler: Handler
    delivery_mode: DeliveryMode = DeliveryMode.AT_MOST_ONCE
    exclusive: bool = False
    lossy: bool = False
    retry: RetryPolicy | None = None
    timeout_s: float | None = None


def check_target_name(name: object) -> None:
    """Raise InvalidArgument for a target name no store can hold (`check_text`: U+0000,
    a lone surrogate), in the words an enqueue uses for its other texts."""
    if not isinstance(name, str) or not name:
        raise InvalidArgument("a target needs a name")
    check_text("target", name)


def lane_and_mode(
    name: str, lane: Lane | str, delivery_mode: DeliveryMode | str
) -> tuple[Lane, DeliveryMode]:
    """`lane` and `delivery_mode` as their enums, or InvalidArgument naming the target and
    the values that are valid."""
    try:
        checked_lane = Lane(lane)
    except ValueError:
        raise InvalidArgument(
            f"target {name!r}: lane {lane!r} is not one of {_choices(Lane)}"
        ) from None
    try:
        mode = DeliveryMode(delivery_mode)
    except ValueError:
        raise InvalidArgument(
            f"target {name!r}: delivery_mode {delivery_mode!r} is not one of"
            f" {_choices(DeliveryMode)}"
        ) from None
    return checked_lane, mode


def _choices(kind: type[Lane] | type[DeliveryMode]) -> str:
    return ", ".join(repr(member.value) for member in kind)


@dataclass(frozen=True, slots=True)
class RunLimits:
    """What a target's timeout is checked against and run on: the engine's clock and its
    leases (`Settings.partition_lease_s`, `Settings.long_lease_s`)."""

    clock: Clock
    partition_lease_s: float
    long_lease_s: float


class TargetRegistry:
    def __init__(self, default_max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> None:
        self._targets: dict[str, Target] = {}
        self._max_attempts: dict[str, int] = {}
        self.default_max_attempts = default_max_attempts
        self._limits: RunLimits | None = None

    def register(
        self,
        name: str,
        lane: Lane | str,
        handler: Callable[[Job], Any],
        *,
        delivery_mode: DeliveryMode | str = DeliveryMode.AT_MOST_ONCE,
        exclusive: bool = False,
        lossy: bool = False,
        retry: object = None,
        timeout_s: object = None,
    ) -> Target:
        """Register `handler` for target `name`. `retry`: a list of delays (seconds or
        timedeltas) or a `Backoff` (None: the settings' delays); `timeout_s`: the longest
        a run may take (None: no limit), refused when it does not fit the lane's lease
        (checked here once the registry is bound to an engine, else at `bind`)."""
        check_target_name(name)
        if name in self._targets:
            raise DuplicateTarget(f"target {name!r} is already registered")
        checked_lane, mode = lane_and_mode(name, lane, delivery_mode)
        policy = retry_policy(name, retry)
        timeout = check_timeout(name, timeout_s)
        target = Target(
            name, checked_lane, as_async(handler), mode, exclusive, lossy, policy, timeout
        )
        if self._limits is not None:
            target = self._timed(target, self._limits)
        self._targets[name] = target
        return target

    def bind(self, limits: RunLimits) -> None:
        """Give the registry its engine's clock and leases (`Engine` does, once): every
        target's timeout is checked against its lane's lease (ConfigError in one line
        naming the target, the timeout and the lease) and its handler wrapped; targets
        registered later are checked when registered."""
        if self._limits is not None:
            raise ConfigError("the target registry is already bound to an engine")
        targets = {name: self._timed(t, limits) for name, t in self._targets.items()}
        self._targets, self._limits = targets, limits

    @staticmethod
    def _timed(target: Target, limits: RunLimits) -> Target:
        if target.timeout_s is None:
            return target
        refusal = timeout_refusal(
            target.name,
            target.lane,
            target.timeout_s,
            limits.partition_lease_s,
            limits.long_lease_s,
        )
        if refusal is not None:
            raise ConfigError(refusal)
        handler = with_timeout(target.handler, target.name, target.timeout_s, limits.clock)
        return replace(target, handler=handler)

    def target(
        self,
        name: str,
        lane: Lane | str = Lane.FAST,
        *,
        delivery_mode: DeliveryMode | str = DeliveryMode.AT_MOST_ONCE,
        exclusive: bool = False,
        retry: object = None,
        timeout_s: object = None,
    ) -> Callable[[Callable[[Job], Any]], Callable[[Job], Any]]:
        """Decorator form of `register`: `@app.target("mail:welcome", "long")` above the
        handler registers it and leaves the function as it was."""

        def decorate(handler: Callable[[Job], Any]) -> Callable[[Job], Any]:
            self.register(
                name,
                lane,
                handler,
                delivery_mode=delivery_mode,
                exclusive=exclusive,
                retry=retry,
                timeout_s=timeout_s,
            )
            return handler

        return decorate

    def replace_delivery_mode(self, name: str, mode: DeliveryMode) -> None:
        """Switch a registered target's mode (KAFKA_TARGET_TOPICS `topic:at_least_once`)."""
        self._targets[name] = replace(self.get(name), delivery_mode=mode)

    def get(self, name: str) -> Target:
        try:
            return self._targets[name]
        except KeyError:
            check_target_name(name)  # a name no store holds: that, not "not registered"
            raise UnknownTarget(f"target {name!r} is not registered") from None

    def find(self, name: str) -> Target | None:
        return self._targets.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._targets

    def names(self) -> list[str]:
        return sorted(self._targets)

    def set_max_attempts(self, code: str, attempts: int) -> None:
        """Total runs allowed for jobs of `code` before DEAD (reference per-code max)."""
        if attempts < 1:
            raise InvalidArgument(f"max attempts for {code!r} must be at least 1")
        self._max_attempts[code] = attempts

    def max_attempts(self, code: str, target: Target | None = None) -> int:
        """Runs allowed for a job of `code` before DEAD: the per-code maximum when one is
        set, else what `target`'s retry policy allows, else the default."""
        found = self._max_attempts.get(code)
        if found is not None:
            return found
        attempts = target.retry.attempts if target is not None and target.retry else None
        return self.default_max_attempts if attempts is None else attempts
