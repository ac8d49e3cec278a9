"""Alerts: a pluggable hook called when a person should look (closes the alert half of G3).

    job_dead         a job went DEAD (max attempts, dead_now, unknown outcome, takeover)
    target_paused    a target stayed paused longer than `settings.pause_alert_s`
                     (once per pause; the pause start is tracked per target)
    schedule_missed  a schedule tick found missed slots or skipped late ones

The default hook writes one structured error log line per alert, `job dead alert …`
as the reference engine writes it. Plug a pager in by passing any object with
`alert(kind, message, fields)` to `AlertObserver` / `install_observers(alert_hook=…)`.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any, Protocol

from jobledger.core.clock import Clock
from jobledger.domain.jobs import Job
from jobledger.domain.timeutil import iso
from jobledger.observability.observe import Observer, RunRecord

logger = logging.getLogger("jobledger.observability.alerts")

JOB_DEAD = "job_dead"
TARGET_PAUSED = "target_paused"
SCHEDULE_MISSED = "schedule_missed"

# LogRecord attribute names an `extra` must not overwrite
_RESERVED = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class AlertHook(Protocol):
    def alert(self, kind: str, message: str, fields: Mapping[str, Any]) -> None: ...


class LogAlertHook:
    """The default: one error-level log line with the alert's fields as `extra`."""

    def __init__(self, log: logging.Logger | None = None, *, skip: Collection[str] = ()) -> None:
        self.log = log or logger
        self.skip = frozenset(skip)  # kinds some other part already logs

    def alert(self, kind: str, message: str, fields: Mapping[str, Any]) -> None:
        if kind in self.skip:
            return
        extra = {("field_" + k if k in _RESERVED else k): v for k, v in fields.items()}
        self.log.error(message, extra={"alert": kind, **extra})


class AlertObserver(Observer):
    """Turns engine events into alerts.

    A long pause is noticed (a) when the lanes report the target paused again (after a
    failed probe), (b) on any other event once `clock` is given, (c) by `check()` /
    the `watch()` loop, and (d) at the latest when the target resumes.
    """

    def __init__(
        self,
        hook: AlertHook | None = None,
        *,
        pause_alert_s: float = 300.0,
        clock: Clock | None = None,
    ) -> None:
        self.hook: AlertHook = hook or LogAlertHook()
        self.pause_alert_s = pause_alert_s
        self.clock = clock
        self._paused: dict[str, datetime] = {}  # target → start of the current pause
        self._alerted: set[str] = set()  # targets alerted during the current pause

    # --- Observer ----------------------------------------------------------------------
    def job_dead(self, job: Job, reason: str, error: str | None) -> None:
        message = (
            f"job dead alert code={job.code} target={job.target} dedupe_key={job.dedupe_key}"
            f" attempts={job.attempts} reason={reason}"
        )
        if error:
            message += f" error={error}"
        fields = {
            "job_id": job.id,
            "code": job.code,
            "target": job.target,
            "key": job.key,
            "dedupe_key": job.dedupe_key,
            "attempts": job.attempts,
            "reason": reason,
            "error": error,
            "trace_id": job.trace_id,
        }
        self.hook.alert(JOB_DEAD, message, fields)

    def target_paused(self, target: str, since: datetime) -> None:
        start = self._paused.setdefault(target, since)
        if since < start:
            self._paused[target] = since
        self.check(self._now(since))

    def target_resumed(self, target: str, paused_s: float) -> None:
        start = self._paused.pop(target, None)
        alerted = target in self._alerted
        self._alerted.discard(target)
        if not alerted and paused_s >= self.pause_alert_s:
            self._alert_pause(target, paused_s, start, resumed=True)

    def schedule_missed(self, code: str, slots: int, reason: str) -> None:
        message = f"schedule missed alert code={code} slots={slots} reason={reason}"
        self.hook.alert(SCHEDULE_MISSED, message, {"code": code, "slots": slots, "reason": reason})

    def run_finished(self, record: RunRecord) -> None:
        if self.clock is not None and self._paused:
            self.check()

    def partitions_owned(self, pod: str, count: int) -> None:
        if self.clock is not None and self._paused:
            self.check()

    # --- the pause watchdog ------------------------------------------------------------
    def paused_targets(self) -> dict[str, datetime]:
        return dict(self._paused)

    def check(self, now: datetime | None = None) -> list[str]:
        """Alert for every target paused longer than the limit and not yet alerted."""
        now = now or self._now(None)
        fired = []
        for target, start in list(self._paused.items()):
            paused_s = (now - start).total_seconds()
            if target not in self._alerted and paused_s >= self.pause_alert_s:
                self._alert_pause(target, paused_s, start, resumed=False)
                fired.append(target)
        return fired

    async def watch(self, interval_s: float = 15.0) -> None:
        """Run `check()` every `interval_s` on the injected clock until cancelled."""
        if self.clock is None:
            raise RuntimeError("AlertObserver.watch needs a clock")
        while True:
            await self.clock.sleep(interval_s)
            self.check()

    def _alert_pause(
        self, target: str, paused_s: float, start: datetime | None, *, resumed: bool
    ) -> None:
        self._alerted.add(target)
        if resumed:
            self._alerted.discard(target)
        message = (
            f"target paused alert target={target} paused_s={paused_s:.0f}"
            f" limit_s={self.pause_alert_s:g}{' resumed=true' if resumed else ''}"
        )
        fields = {
            "target": target,
            "paused_s": round(paused_s, 3),
            "since": iso(start) if start else None,
            "resumed": resumed,
        }
        self.hook.alert(TARGET_PAUSED, message, fields)

    def _now(self, fallback: datetime | None) -> datetime:
        if self.clock is not None:
            return self.clock.now()
        if fallback is None:
            raise RuntimeError("AlertObserver.check() needs `now` or a clock")
        return max([fallback, *self._paused.values()])
