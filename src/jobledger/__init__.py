"""jobledger: an event-sourced job engine.

    app = jobledger.App(store="sqlite:///app.db")     # see README.md, docs/getting-started.md

Business code appends enqueue events inside its own database transaction; every
job and schedule transition is an event in an append-only log; the queue and the
admin read models are projections of that log.
"""

from jobledger.app import App
from jobledger.domain.errors import (
    DeadNow,
    JobledgerError,
    TargetOutcomeUnknown,
    TargetUnreachable,
)

__all__ = ["App", "DeadNow", "JobledgerError", "TargetOutcomeUnknown", "TargetUnreachable"]
__version__ = "0.1.0"
