"""Structured logs: the reference's run line, JSON lines on demand, and the observer wiring.

Every run writes one line (the reference engine's, with the job's id added)::

    job run code=do_update_oms target=kafka:… dedupe_key=… attempts=1 duration_ms=12 result=ok job_id=…

(written by the lanes and the lossy runners through `log_run_line`'s format) with the
same values as `extra` fields (code, target, dedupe_key, attempts, duration_ms,
result, job_id, key, lane, trace_id, error), so `JOBLEDGER_LOG_FORMAT=json` turns each
line into an object a log pipeline can filter on (`configure_logging`).

`install_observers` hangs logs, alerts, metrics, tracing and the event-loop watchdog
on `engine.observers`; the composition root calls it once (and runs the watchdog as a
reactor of the pod's workers).
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any

from jobledger.config.settings import Settings
from jobledger.core import context
from jobledger.domain.timeutil import iso
from jobledger.observability.observe import Observer, RunRecord

if TYPE_CHECKING:
    from jobledger.engine import Engine
    from jobledger.observability.alerts import AlertHook, AlertObserver
    from jobledger.observability.loop_lag import LoopMonitor
    from jobledger.observability.metrics import MetricsObserver
    from jobledger.observability.tracing import TracingObserver

run_logger = logging.getLogger("jobledger.run")
target_logger = logging.getLogger("jobledger.targets")

RUN_LINE = (
    "job run code=%s target=%s dedupe_key=%s attempts=%d duration_ms=%.1f result=%s job_id=%s%s"
)
QUIET_RESULTS = {"ok", "skipped"}  # info; every other result is a warning
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def run_line_level(result: str) -> int:
    """info for ok/skipped runs, warning for every other result."""
    return logging.INFO if result in QUIET_RESULTS else logging.WARNING


def log_run_line(record: RunRecord) -> None:
    """Write the reference's run line for `record` (info; warning unless ok/skipped)."""
    job = record.job
    level = run_line_level(record.result)
    if not run_logger.isEnabledFor(level):
        return
    extra: dict[str, Any] = {
        "job_id": job.id,
        "code": job.code,
        "target": job.target,
        "key": job.key,
        "lane": job.lane.value,
        "dedupe_key": job.dedupe_key,
        "attempts": record.attempts,
        "duration_ms": round(record.duration_ms, 3),
        "result": record.result,
        "error": record.error,
        "trace_id": job.trace_id,
    }
    failure = record.failure
    if failure is not None:  # a failed run: which attempt, why, and what was raised
        extra["attempt"] = failure.get("attempt")
        extra["failure_reason"] = failure.get("reason")
        extra["error_class"] = failure.get("error_class")
    exc = record.exc
    # The record is built here and handed to the logger's handlers, as `Logger.log`
    # would after looking up its caller's frame: a line a job, and that look-up was a
    # fifth of the line's cost, for a file and line no format of this module prints.
    line = run_logger.makeRecord(
        run_logger.name,
        level,
        __file__,
        0,
        RUN_LINE,
        (
            job.code,
            job.target,
            job.dedupe_key,
            record.attempts,
            record.duration_ms,
            record.result,
            job.id,
            _failure_text(failure, record.error, job.trace_id),
        ),
        (type(exc), exc, exc.__traceback__) if exc is not None else None,
        "log_run_line",
        extra,
    )
    run_logger.handle(line)


def _failure_text(failure: Mapping[str, Any] | None, error: str | None, trace: str | None) -> str:
    """The run line's tail: ` error=…`, and for a failed run its attempt, reason, class
    and trace id before it."""
    text = f" error={error}" if error else ""
    if failure is not None:
        text = (
            f" attempt={failure.get('attempt')} reason={failure.get('reason')}"
            f" error_class={failure.get('error_class') or '-'} trace_id={trace or '-'}" + text
        )
    return text


class RunLogObserver(Observer):
    """Target pause/resume lines, and — with `run_lines=True` — the run line.

    The lanes (`reactors.outcome.OutcomePath.log_run`) and the lossy runners already
    write the run line themselves, so `install_observers` leaves `run_lines` off; turn
    it on for a runner that only reports `RunRecord`s.
    """

    def __init__(self, *, run_lines: bool = False) -> None:
        self.run_lines = run_lines

    def run_finished(self, record: RunRecord) -> None:
        if self.run_lines:
            log_run_line(record)

    def target_paused(self, target: str, since: datetime) -> None:
        target_logger.warning(
            "target paused target=%s since=%s",
            target,
            iso(since),
            extra={"target": target, "since": iso(since)},
        )

    def target_resumed(self, target: str, paused_s: float) -> None:
        target_logger.info(
            "target resumed target=%s paused_s=%.0f",
            target,
            paused_s,
            extra={"target": target, "paused_s": round(paused_s, 3)},
        )


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ts, level, logger, message, every `extra` field, the
    current jobledger trace id when the record has none, and the exception text."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": iso(datetime.fromtimestamp(record.created, UTC)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in vars(record).items():
            if name not in _STANDARD and not name.startswith("_"):
                out[name] = value
        if out.get("trace_id") is None:
            trace_id = context.current().trace_id
            if trace_id:
                out["trace_id"] = trace_id
            else:
                out.pop("trace_id", None)
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=str, ensure_ascii=False)


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"

#: what a text line must not carry as it is: C0 and C1 controls and DEL (a newline
#: forges a line, an escape sequence rewrites a terminal), the Unicode line and
#: paragraph separators, and the bidirectional overrides that reorder what is shown
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_one(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """`text` with its control characters written as escapes (`\\n`, `\\x1b`,
    `\\u2028`): one line, whatever a key, a target or an error message held."""
    return _CONTROL.sub(_escape_one, text) if _CONTROL.search(text) else text


class TextFormatter(logging.Formatter):
    """The text format, one record a line: the message's control characters escaped
    (what a key, dedupe key, target or error holds comes from callers and handlers);
    an exception or stack below it, each of its lines indented by two spaces, so no
    line of it can pass for a record of its own."""

    _stamped: tuple[int, str] = (-1, "")  # the last second written, as text

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        """`logging.Formatter.formatTime`, the date and time of a second written once
        for all the lines of that second (a worker writes a line a job)."""
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        stamped, text = self._stamped
        if stamped != second:
            text = time.strftime(self.default_time_format, self.converter(record.created))
            self._stamped = (second, text)  # one assignment: a handler in another thread
        return f"{text},{int(record.msecs):03d}"

    def format(self, record: logging.LogRecord) -> str:
        record.message = escape_controls(record.getMessage())
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        line = self.formatMessage(record)
        # not `record.exc_text`: another handler may have cached it unindented
        if record.exc_info:
            line += "\n" + _indented(self.formatException(record.exc_info))
        elif record.exc_text:
            line += "\n" + _indented(record.exc_text)
        if record.stack_info:
            line += "\n" + _indented(self.formatStack(record.stack_info))
        return line


def _indented(text: str) -> str:
    return "\n".join("  " + escape_controls(line) for line in text.splitlines())


def configure_logging(settings: Settings, stream: IO[str] | None = None) -> logging.Handler:
    """Install one root handler for `settings.log_format` (text | json) and set
    `settings.log_level`. Calling it again replaces the handler it installed before."""
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_jobledger", False)]:
        root.removeHandler(old)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler._jobledger = True  # type: ignore[attr-defined]
    formatter = JsonFormatter() if settings.log_format == "json" else TextFormatter(TEXT_FORMAT)
    handler.setFormatter(formatter)
    root.addHandler(handler)
    root.setLevel(settings.log_level)
    return handler


@dataclass
class Telemetry:
    """What `install_observers` hung on the engine."""

    logs: RunLogObserver
    alerts: AlertObserver
    metrics: MetricsObserver | None
    tracing: TracingObserver | None
    loop: LoopMonitor | None = None  # None when loop_block_warn_s is 0

    @property
    def registry(self) -> Any:
        """The Prometheus registry to serve at /metrics (None without prometheus_client)."""
        return self.metrics.registry if self.metrics is not None else None


def install_observers(
    engine: Engine,
    settings: Settings | None = None,
    *,
    alert_hook: AlertHook | None = None,
    metrics_registry: Any = None,
    tracer_provider: Any = None,
) -> Telemetry:
    """Add the run log, alert, metrics and tracing observers and the event-loop watchdog
    (`telemetry.loop`: start and stop it with the workers) to `engine.observers`.

    Metrics need prometheus_client (the `http` extra) and tracing opentelemetry-api (the
    `otel` extra); a missing package leaves that observer out with a warning.
    """
    from jobledger.observability.alerts import JOB_DEAD, AlertObserver, LogAlertHook
    from jobledger.observability.loop_lag import LoopMonitor

    settings = settings or engine.settings
    logs = RunLogObserver()
    # reactors.outcome already writes the `job dead alert` error line for every DEAD
    hook = alert_hook if alert_hook is not None else LogAlertHook(skip={JOB_DEAD})
    alerts = AlertObserver(hook, pause_alert_s=settings.pause_alert_s, clock=engine.clock)
    metrics: MetricsObserver | None = None
    tracing: TracingObserver | None = None
    try:
        from jobledger.observability.metrics import MetricsObserver, set_default_registry

        metrics = MetricsObserver(metrics_registry)
        set_default_registry(metrics.registry)
        register_store = getattr(engine.store, "register_metrics", None)  # the store's own
        if register_store is not None:
            register_store(metrics.registry)
    except ImportError:
        logging.getLogger("jobledger").warning("prometheus_client is not installed: no metrics")
    try:
        from jobledger.observability.tracing import TracingObserver

        tracing = TracingObserver(tracer_provider)
    except ImportError:  # pragma: no cover - tracing imports the api lazily
        tracing = None
    loop = None
    if settings.loop_block_warn_s > 0:
        loop = LoopMonitor(engine.observers, settings.loop_block_warn_s)
        if metrics is not None:
            metrics.watch_loop(loop.stalled_s)
    for observer in (logs, alerts, metrics, tracing, loop):
        if observer is not None:
            engine.observers.add(observer)
    return Telemetry(logs, alerts, metrics, tracing, loop)
