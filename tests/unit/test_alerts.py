"""Alerts: DEAD, a pause longer than the limit (once per pause), missed schedule slots."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

import pytest

from jobledger.core.clock import FakeClock
from jobledger.observability.alerts import AlertObserver, LogAlertHook
from tests.builders import T0, a_job


class Pager:
    def __init__(self) -> None:
        self.alerts: list[tuple[str, str, dict[str, Any]]] = []

    def alert(self, kind: str, message: str, fields: Mapping[str, Any]) -> None:
        self.alerts.append((kind, message, dict(fields)))

    @property
    def kinds(self) -> list[str]:
        return [kind for kind, _, _ in self.alerts]


def test_dead_job_alerts_with_its_fields() -> None:
    pager = Pager()
    AlertObserver(pager).job_dead(a_job(), "max_attempts", "HTTP 500")
    ((kind, message, fields),) = pager.alerts
    assert kind == "job_dead"
    assert message.startswith("job dead alert code=order_update target=kafka:orders")
    assert "dedupe_key=order_update:o-1:1" in message and "reason=max_attempts" in message
    assert fields["job_id"] == "1" * 32 and fields["error"] == "HTTP 500"


def test_long_pause_alerts_once_per_pause(clock: FakeClock) -> None:
    pager = Pager()
    alerts = AlertObserver(pager, pause_alert_s=300, clock=clock)
    alerts.target_paused("kafka:orders", clock.now())
    clock.advance(seconds=299)
    assert alerts.check() == [] and pager.alerts == []
    clock.advance(seconds=1)
    assert alerts.check() == ["kafka:orders"]
    clock.advance(minutes=30)
    assert alerts.check() == []  # once per pause
    alerts.target_paused("kafka:orders", clock.now())  # re-pause after a failed probe
    assert pager.kinds == ["target_paused"]
    _, message, fields = pager.alerts[0]
    assert "target=kafka:orders" in message and fields["paused_s"] == 300
    alerts.target_resumed("kafka:orders", 2100)
    assert pager.kinds == ["target_paused"]
    # a new pause is a new alert
    alerts.target_paused("kafka:orders", clock.now())
    clock.advance(minutes=6)
    alerts.check()
    assert pager.kinds == ["target_paused", "target_paused"]


def test_other_events_and_repeated_pause_notice_a_long_pause(clock: FakeClock) -> None:
    pager = Pager()
    alerts = AlertObserver(pager, pause_alert_s=60, clock=clock)
    alerts.target_paused("t", clock.now())
    clock.advance(seconds=30)
    alerts.target_paused("t", clock.now())
    assert pager.alerts == []
    clock.advance(seconds=30)
    alerts.target_paused("t", clock.now())  # the lanes pause again after a failed probe
    assert pager.kinds == ["target_paused"]


def test_short_pause_is_quiet_and_a_long_one_alerts_at_resume_at_the_latest() -> None:
    pager = Pager()
    alerts = AlertObserver(pager, pause_alert_s=300)  # no clock: nothing to poll with
    alerts.target_paused("a", T0)
    alerts.target_resumed("a", 30)
    assert pager.alerts == []
    alerts.target_paused("b", T0)
    alerts.target_resumed("b", 400)
    assert pager.kinds == ["target_paused"]
    assert pager.alerts[0][2]["resumed"] is True


async def test_watch_checks_on_the_injected_clock(clock: FakeClock) -> None:
    pager = Pager()
    alerts = AlertObserver(pager, pause_alert_s=60, clock=clock)
    alerts.target_paused("t", clock.now())
    task = asyncio.create_task(alerts.watch(interval_s=15))
    for _ in range(4):
        await asyncio.sleep(0)
        clock.advance(seconds=15)
        await asyncio.sleep(0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert pager.kinds == ["target_paused"]
    assert alerts.paused_targets() == {"t": T0}


def test_schedule_missed_alerts() -> None:
    pager = Pager()
    AlertObserver(pager).schedule_missed("nightly", 3, "pods_down")
    assert pager.alerts == [
        ("schedule_missed", "schedule missed alert code=nightly slots=3 reason=pods_down",
         {"code": "nightly", "slots": 3, "reason": "pods_down"}),
    ]  # fmt: skip


def test_default_hook_writes_a_structured_error_line(caplog: pytest.LogCaptureFixture) -> None:
    AlertObserver().job_dead(a_job(), "dead_now", None)
    (record,) = [r for r in caplog.records if r.name == "jobledger.observability.alerts"]
    assert record.levelno == logging.ERROR
    assert record.getMessage().startswith("job dead alert code=order_update")
    assert (
        vars(record)["alert"] == "job_dead" and vars(record)["dedupe_key"] == "order_update:o-1:1"
    )


def test_log_hook_skips_kinds_logged_elsewhere_and_renames_reserved_fields(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hook = LogAlertHook(skip={"job_dead"})
    hook.alert("job_dead", "job dead alert …", {})
    hook.alert("custom", "custom alert", {"name": "x", "message": "y"})
    (record,) = [r for r in caplog.records if r.name == "jobledger.observability.alerts"]
    assert vars(record)["field_name"] == "x" and vars(record)["field_message"] == "y"
