"""Errors with stable machine-readable codes, and the signals a handler raises.

`JobledgerError.code` is what the admin API returns in `{statusCode, code, message[]}`.
The three handler signals tell the outcome path how a run ended; any other exception
a handler raises is an *answered failure*.
"""

from __future__ import annotations


class JobledgerError(Exception):
    """An error the caller can act on; `code` is stable, `status` is the HTTP status."""

    code = "error"
    status = 400

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else self.code


class UnknownTarget(JobledgerError):
    code = "unknown_target"


class DuplicateTarget(JobledgerError):
    code = "duplicate_target"


class DuplicateSchedule(JobledgerError):
    code = "duplicate_schedule"


class InvalidCron(JobledgerError):
    code = "invalid_cron"


class InvalidPayload(JobledgerError):
    """Payload is not JSON-serialisable, or larger than the configured limit."""

    code = "invalid_payload"


class InvalidArgument(JobledgerError):
    code = "invalid_argument"


class NotFound(JobledgerError):
    code = "not_found"
    status = 404


class InvalidStatus(JobledgerError):
    """The row is not in a state the command accepts, or a concurrent writer won."""

    code = "invalid_status"
    status = 409


class ConfigError(JobledgerError):
    code = "invalid_config"


# --- handler signals: how a handler says why its run failed -----------------


class TargetUnreachable(Exception):
    """Nothing reached the target: pause it, spend no attempt."""


class TargetOutcomeUnknown(Exception):
    """The request may have landed with no answer.

    at-most-once → DEAD at once (target paused unless `target_up`);
    at-least-once → treated as unreachable.
    """

    def __init__(self, message: str = "outcome unknown", *, target_up: bool = False) -> None:
        super().__init__(message)
        self.target_up = target_up


class DeadNow(Exception):
    """A resend can never succeed: DEAD at once, pause state left as it is."""

    dead_now = True


class SkipRun(Exception):
    """Leave the job without running it, with a reason (a schedule slot that started late).

    The outcome path writes JobSkipped with `reason`; no attempt is spent.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RunTimedOut(Exception):
    """Raised in place of a run that outlived its target's `timeout_s`: the engine
    stopped waiting for it (an `async def` handler was cancelled; a `def` handler's
    thread cannot be, and runs on). Recorded through the usual failure path, with the
    failure reason `timeout` (`domain.failures.reason_of`): an at-least-once target's
    run is a failed attempt, retried per its policy; an at-most-once target's goes
    DEAD, since the run may have had its effect."""

    failure_reason = "timeout"

    def __init__(self, target: str, timeout_s: float) -> None:
        super().__init__(f"timeout: the run of {target} took longer than timeout_s={timeout_s:g}")
        self.target = target
        self.timeout_s = timeout_s
