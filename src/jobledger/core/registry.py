"""The in-process target registry: target name → lane, handler, delivery mode.

A handler is an `async def` (or an object with an `async def __call__`). A plain `def`
is accepted too and runs in a worker thread (`asyncio.to_thread`), so a blocking call
(an HTTP client, an SMTP library) does not stall the lanes' event loop — and a plain
function no longer "runs, then fails on `await None`" and repeats its side effect.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from jobledger.domain.enqueue_rules import check_text
from jobledger.domain.errors import DuplicateTarget, InvalidArgument, UnknownTarget
from jobledger.domain.jobs import DeliveryMode, Job, Lane
from jobledger.domain.policies import DEFAULT_MAX_ATTEMPTS

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


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    lane: Lane
    handler: Handler
    delivery_mode: DeliveryMode = DeliveryMode.AT_MOST_ONCE
    exclusive: bool = False
    lossy: bool = False


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


class TargetRegistry:
    def __init__(self, default_max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> None:
        self._targets: dict[str, Target] = {}
        self._max_attempts: dict[str, int] = {}
        self.default_max_attempts = default_max_attempts

    def register(
        self,
        name: str,
        lane: Lane | str,
        handler: Callable[[Job], Any],
        *,
        delivery_mode: DeliveryMode | str = DeliveryMode.AT_MOST_ONCE,
        exclusive: bool = False,
        lossy: bool = False,
    ) -> Target:
        check_target_name(name)
        if name in self._targets:
            raise DuplicateTarget(f"target {name!r} is already registered")
        checked_lane, mode = lane_and_mode(name, lane, delivery_mode)
        target = Target(name, checked_lane, as_async(handler), mode, exclusive, lossy)
        self._targets[name] = target
        return target

    def target(
        self,
        name: str,
        lane: Lane | str = Lane.FAST,
        *,
        delivery_mode: DeliveryMode | str = DeliveryMode.AT_MOST_ONCE,
        exclusive: bool = False,
    ) -> Callable[[Callable[[Job], Any]], Callable[[Job], Any]]:
        """Decorator form of `register`: `@app.target("mail:welcome", "long")` above the
        handler registers it and leaves the function as it was."""

        def decorate(handler: Callable[[Job], Any]) -> Callable[[Job], Any]:
            self.register(name, lane, handler, delivery_mode=delivery_mode, exclusive=exclusive)
            return handler

        return decorate

    def replace_delivery_mode(self, name: str, mode: DeliveryMode) -> None:
        """Switch a registered target's mode (KAFKA_TARGET_TOPICS `topic:at_least_once`)."""
        target = self.get(name)
        self._targets[name] = Target(
            target.name, target.lane, target.handler, mode, target.exclusive, target.lossy
        )

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

    def max_attempts(self, code: str) -> int:
        return self._max_attempts.get(code, self.default_max_attempts)
