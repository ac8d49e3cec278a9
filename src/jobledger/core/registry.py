"""The in-process target registry (reference §4 `JobTargetsRegistry`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from jobledger.domain.errors import DuplicateTarget, InvalidArgument, UnknownTarget
from jobledger.domain.jobs import DeliveryMode, Job, Lane
from jobledger.domain.policies import DEFAULT_MAX_ATTEMPTS

Handler = Callable[[Job], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    lane: Lane
    handler: Handler
    delivery_mode: DeliveryMode = DeliveryMode.AT_MOST_ONCE
    exclusive: bool = False
    lossy: bool = False


class TargetRegistry:
    def __init__(self, default_max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> None:
        self._targets: dict[str, Target] = {}
        self._max_attempts: dict[str, int] = {}
        self.default_max_attempts = default_max_attempts

    def register(
        self,
        name: str,
        lane: Lane | str,
        handler: Handler,
        *,
        delivery_mode: DeliveryMode | str = DeliveryMode.AT_MOST_ONCE,
        exclusive: bool = False,
        lossy: bool = False,
    ) -> Target:
        if not name:
            raise InvalidArgument("a target needs a name")
        if name in self._targets:
            raise DuplicateTarget(f"target {name!r} is already registered")
        try:
            target = Target(
                name, Lane(lane), handler, DeliveryMode(delivery_mode), exclusive, lossy
            )
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from exc
        self._targets[name] = target
        return target

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
