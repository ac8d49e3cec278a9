"""jobledger: an event-sourced job engine.

Business code appends enqueue events inside its own database transaction; every
job and schedule transition is an event in an append-only log; the queue and the
admin read models are projections of that log.
"""

from jobledger.domain.errors import (
    DeadNow,
    JobledgerError,
    TargetOutcomeUnknown,
    TargetUnreachable,
)

__all__ = ["DeadNow", "JobledgerError", "TargetOutcomeUnknown", "TargetUnreachable"]
__version__ = "0.1.0"
