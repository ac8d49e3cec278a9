"""Per-pod pause state of unreachable targets: each pod keeps its own.

A target the outcome path reports as unreachable is paused on this pod: its rows are
skipped, no attempt is spent. Every `probe_interval_s` one probe row may go through;
its success resumes the target, another unreachable answer pauses it again. The state
lives in memory only: losing it on a restart is harmless (rows and attempts are in
the store).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from jobledger.core.clock import Clock
from jobledger.core.registry import Target
from jobledger.domain.lanes import TargetView
from jobledger.observability.observe import Observer


@dataclass(slots=True)
class _Paused:
    since: datetime
    probe_at: datetime


class PauseMap:
    def __init__(self, clock: Clock, probe_interval_s: float, observers: Observer) -> None:
        self._clock = clock
        self._interval = timedelta(seconds=probe_interval_s)
        self._observers = observers
        self._paused: dict[str, _Paused] = {}

    def pause(self, target: str) -> None:
        """Pause `target` (again): the next probe is one interval from now."""
        now = self._clock.now()
        entry = self._paused.get(target)
        if entry is None:
            self._paused[target] = _Paused(now, now + self._interval)
            self._observers.target_paused(target, now)
        else:
            entry.probe_at = now + self._interval

    def resume(self, target: str) -> None:
        entry = self._paused.pop(target, None)
        if entry is not None:
            paused_s = (self._clock.now() - entry.since).total_seconds()
            self._observers.target_resumed(target, paused_s)

    def is_paused(self, target: str) -> bool:
        return target in self._paused

    def probe_due(self, target: str) -> bool:
        entry = self._paused.get(target)
        return entry is not None and entry.probe_at <= self._clock.now()

    def take_probe(self, target: str) -> bool:
        """Claim the probe of paused `target`: True when it was due (the caller sends one
        row, the next probe waits a full interval), False when it is not (another caller
        of this pod took it since the caller planned; nothing of `target` goes out)."""
        entry = self._paused.get(target)
        now = self._clock.now()
        if entry is None or entry.probe_at > now:
            return False
        entry.probe_at = now + self._interval
        return True

    def view(self, target: Target) -> TargetView:
        """What the lanes' planner needs to know of `target` on this pod now."""
        return TargetView(
            target.delivery_mode,
            paused=target.name in self._paused,
            probe_due=self.probe_due(target.name),
            exclusive=target.exclusive,
        )

    def next_probe(self, targets: frozenset[str] | set[str]) -> datetime | None:
        times = [self._paused[t].probe_at for t in targets if t in self._paused]
        return min(times, default=None)

    def paused(self) -> dict[str, datetime]:
        return {t: p.since for t, p in self._paused.items()}
