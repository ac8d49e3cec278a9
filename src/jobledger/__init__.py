"""jobledger: an event-sourced job engine.

    app = jobledger.App(store="sqlite:///app.db")     # see README.md, docs/getting-started.md

Business code appends enqueue events inside its own database transaction; every
job and schedule transition is an event in an append-only log; the queue and the
admin read models are projections of that log.

What an application needs is here: `App`, the records it gets back (`Job` for a
handler, `Enqueued` from an enqueue, `Done` from `wait_done`), `NewJob` for
`enqueue_many`, the errors an enqueue or an admin call raises (all `JobledgerError`),
and the signals a handler raises to steer its outcome (`TargetUnreachable`,
`TargetOutcomeUnknown`, `DeadNow`, `SkipRun`), a target's growing retry delays
(`Backoff`) and what a run past its `timeout_s` is recorded as (`RunTimedOut`). Tests:
`jobledger.testing`.
"""

from jobledger.app import App, Done
from jobledger.domain.errors import (
    ConfigError,
    DeadNow,
    DuplicateTarget,
    InvalidArgument,
    InvalidPayload,
    InvalidStatus,
    JobledgerError,
    NotFound,
    RunTimedOut,
    SkipRun,
    TargetOutcomeUnknown,
    TargetUnreachable,
    UnknownTarget,
)
from jobledger.domain.jobs import Job, JobStatus, NewJob
from jobledger.domain.run_policy import Backoff
from jobledger.engine import Enqueued

__all__ = [
    "App",
    "Backoff",
    "ConfigError",
    "DeadNow",
    "Done",
    "DuplicateTarget",
    "Enqueued",
    "InvalidArgument",
    "InvalidPayload",
    "InvalidStatus",
    "Job",
    "JobStatus",
    "JobledgerError",
    "NewJob",
    "NotFound",
    "RunTimedOut",
    "SkipRun",
    "TargetOutcomeUnknown",
    "TargetUnreachable",
    "UnknownTarget",
]
__version__ = "0.1.0"
