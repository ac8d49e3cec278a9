"""Structured logs: the run line, JSON lines with extra fields, and install_observers."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from jobledger.config.settings import Settings
from jobledger.core import context
from jobledger.core.clock import FakeClock
from jobledger.engine import Engine
from jobledger.observability.alerts import AlertObserver
from jobledger.observability.logs import (
    TEXT_FORMAT,
    JsonFormatter,
    RunLogObserver,
    TextFormatter,
    configure_logging,
    install_observers,
    log_run_line,
)
from jobledger.observability.loop_lag import LoopMonitor
from jobledger.observability.metrics import MetricsObserver
from jobledger.observability.observe import RunRecord
from jobledger.observability.tracing import TracingObserver
from jobledger.storage.memory import MemoryStore
from tests.builders import T0, a_job


@pytest.fixture
def root_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


def test_run_line_has_the_reference_fields(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    job = a_job(trace_id="ef" * 16)
    log_run_line(RunRecord(job, "ok", 12.34, 0, None, T0))
    log_run_line(RunRecord(job, "failed", 3.0, 1, "HTTP 500", T0))
    ok, failed = caplog.records
    assert ok.getMessage() == (
        "job run code=order_update target=kafka:orders dedupe_key=order_update:o-1:1"
        f" attempts=0 duration_ms=12.3 result=ok job_id={job.id}"
    )
    assert ok.levelno == logging.INFO and failed.levelno == logging.WARNING
    assert failed.getMessage().endswith(f"result=failed job_id={job.id} error=HTTP 500")
    fields = vars(ok)
    assert (fields["code"], fields["target"], fields["attempts"], fields["result"]) == (
        "order_update", "kafka:orders", 0, "ok",
    )  # fmt: skip
    assert fields["duration_ms"] == 12.34 and fields["trace_id"] == "ef" * 16


def test_observer_writes_run_lines_only_when_asked(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    record = RunRecord(a_job(), "ok", 1.0, 0, None, T0)
    RunLogObserver().run_finished(record)  # the lanes write their own run line
    assert not [r for r in caplog.records if r.name == "jobledger.run"]
    RunLogObserver(run_lines=True).run_finished(record)
    assert [r.name for r in caplog.records] == ["jobledger.run"]


def test_pause_and_resume_lines(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    observer = RunLogObserver()
    observer.target_paused("kafka:orders", T0)
    observer.target_resumed("kafka:orders", 90.0)
    assert [r.getMessage() for r in caplog.records] == [
        "target paused target=kafka:orders since=2026-03-02T09:00:00.000Z",
        "target resumed target=kafka:orders paused_s=90",
    ]


def test_json_formatter_includes_extra_fields_and_the_trace_id() -> None:
    logger = logging.getLogger("test.json")
    record = logger.makeRecord(
        "test.json", logging.WARNING, __file__, 1, "job run result=%s", ("failed",), None,
        extra={"code": "order_update", "attempts": 2, "when": T0},
    )  # fmt: skip
    with context.request_context(trace_id="aa" * 16):
        data = json.loads(JsonFormatter().format(record))
    assert data["message"] == "job run result=failed"
    assert data["level"] == "warning" and data["logger"] == "test.json"
    assert data["code"] == "order_update" and data["attempts"] == 2
    assert data["when"] == "2026-03-02 09:00:00+00:00"
    assert data["trace_id"] == "aa" * 16
    assert "args" not in data and "levelno" not in data
    assert JsonFormatter().format(record).count("\n") == 0


def test_json_formatter_keeps_exceptions() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record = logging.getLogger("t").makeRecord(
            "t", logging.ERROR, __file__, 1, "x", (), sys.exc_info()
        )
    data = json.loads(JsonFormatter().format(record))
    assert "ValueError: boom" in data["exc_info"]


def test_configure_logging_json(root_logging: None) -> None:
    stream = io.StringIO()
    configure_logging(Settings(log_format="json", log_level="INFO"), stream)
    configure_logging(Settings(log_format="json", log_level="INFO"), stream)  # replaces
    log_run_line(RunRecord(a_job(), "ok", 2.0, 0, None, T0))
    logging.getLogger("jobledger.x").debug("not at INFO")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    data = json.loads(lines[0])
    assert data["result"] == "ok" and data["dedupe_key"] == "order_update:o-1:1"


def test_configure_logging_text(root_logging: None) -> None:
    stream = io.StringIO()
    configure_logging(Settings(), stream)
    log_run_line(RunRecord(a_job(), "ok", 2.0, 0, None, T0))
    assert " INFO jobledger.run job run code=order_update " in stream.getvalue()


FORGED = "\n2026-03-02 09:00:00,000 INFO jobledger.run job run code=x target=bank result=ok"


def test_text_lines_escape_control_characters(root_logging: None) -> None:
    """A newline (or any control character) in a key, dedupe key or target cannot forge
    another line of the text log: each record is one line, its control characters
    written as escapes; an exception's lines stay below it, indented."""
    stream = io.StringIO()
    configure_logging(Settings(), stream)
    job = dataclasses.replace(
        a_job(), dedupe_key=f"d{FORGED}", key="k\r\x1b[2J\x00", target="t\u2028x"
    )
    log_run_line(RunRecord(job, "failed", 2.0, 1, f"boom{FORGED}", T0))
    try:
        raise ValueError(f"bad{FORGED}")
    except ValueError:
        logging.getLogger("jobledger.x").exception("failed for key %s", f"k{FORGED}")
    lines = stream.getvalue().splitlines()
    assert [line for line in lines if not line.startswith(" ")] == [lines[0], lines[1]]
    assert "dedupe_key=d\\n2026-03-02 09:00:00,000 INFO" in lines[0]
    assert "target=t\\u2028x" in lines[0] and "error=boom\\n2026" in lines[0]
    assert "failed for key k\\n2026" in lines[1]
    assert any(line.startswith("  ValueError: bad") for line in lines[2:])
    assert "\x1b" not in stream.getvalue() and "\r" not in stream.getvalue()


class Pager:
    def __init__(self) -> None:
        self.kinds: list[str] = []

    def alert(self, kind: str, message: str, fields: Mapping[str, Any]) -> None:
        self.kinds.append(kind)


def test_install_observers_wires_all_five(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    engine = Engine(MemoryStore(8), clock=clock, settings=Settings(partitions=8, pause_alert_s=60))
    telemetry = install_observers(engine)
    kinds = {type(o) for o in engine.observers.observers}
    assert kinds == {RunLogObserver, AlertObserver, MetricsObserver, TracingObserver, LoopMonitor}
    assert telemetry.loop is not None and telemetry.loop.threshold_s == 0.5
    off = Engine(MemoryStore(8), clock=clock, settings=Settings(loop_block_warn_s=0))
    assert install_observers(off).loop is None
    assert telemetry.alerts.pause_alert_s == 60 and telemetry.alerts.clock is clock
    # the default hook does not repeat the lanes' own `job dead alert` line
    engine.observers.job_dead(a_job(), "max_attempts", None)
    assert not [r for r in caplog.records if r.name == "jobledger.observability.alerts"]
    engine.observers.schedule_missed("nightly", 2, "pods_down")
    assert [
        r.getMessage() for r in caplog.records if r.name == "jobledger.observability.alerts"
    ] == ["schedule missed alert code=nightly slots=2 reason=pods_down"]


def test_install_observers_with_a_custom_hook(clock: FakeClock) -> None:
    engine = Engine(MemoryStore(8), clock=clock, settings=Settings(partitions=8))
    pager = Pager()
    install_observers(engine, alert_hook=pager)
    engine.observers.job_dead(a_job(), "dead_now", "bad")
    engine.observers.target_paused("t", clock.now())
    clock.advance(minutes=5)
    engine.observers.partitions_owned("pod", 8)  # any later event notices the long pause
    assert pager.kinds == ["job_dead", "target_paused"]


def test_the_text_time_matches_the_standard_formatters_across_seconds() -> None:
    """The text formatter writes a second's date and time once for all its lines: each
    line still shows its own second and milliseconds, whatever order the records come
    in (a clock stepped back included)."""
    text, standard = TextFormatter(TEXT_FORMAT), logging.Formatter(TEXT_FORMAT)
    for created in (1_000.5, 1_000.999, 1_001.0, 1_001.25, 1_000.75, 86_400.001, 86_399.999):
        record = logging.makeLogRecord(
            {"msg": "m", "created": created, "msecs": (created % 1) * 1000}
        )
        assert text.formatTime(record) == standard.formatTime(record)
        assert text.formatTime(record, "%H:%M") == standard.formatTime(record, "%H:%M")
