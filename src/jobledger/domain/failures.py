"""Why a run failed: the failure record every failed attempt leaves in its outcome event,
the named reasons, and the attempt history read back from a job's stream.

A run that did not succeed carries a `Failure` in its outcome event's data, under the
key `failure` (JobFailed, JobDead, JobDeferred, JobRequeued, and the JobClaimed of an
expired lease taken back): the reason (`FailureReason`), the exception's qualified class
(`builtins.KeyError`, `billing.client.Declined`), its message, a bounded traceback
(`cut_traceback`: whole frames, the innermost kept), the attempt number and how long
the run took. The event's data is hashed, so the record is covered by the stream's hash
chain like every other field. An ending the engine decided without a run of its own (a
lease that expired, a row in flight at a takeover, a pod that died) has a reason and a
message and no class or traceback.

Events written before the record existed have no `failure`: `attempt_history` shows
them with the reason their event implies and an unknown class (decisions D50).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jobledger.domain.errors import DeadNow, RunTimedOut, TargetOutcomeUnknown, TargetUnreachable
from jobledger.domain.events import Event, EventType
from jobledger.domain.jobs import storable_text
from jobledger.domain.records import fast_init

#: what a failure record keeps of a traceback at most (characters): the innermost frames
MAX_TRACEBACK_CHARS = 8000
#: the innermost frames formatted at most (more would not fit in the bound: formatting
#: them, which reads their source lines, would be wasted on a deep recursion)
MAX_TRACEBACK_FRAMES = 40
#: what it keeps of a class name (the stores' text index limit)
MAX_CLASS_CHARS = 512
#: the attempts `attempt_history` returns at most (the newest)
MAX_HISTORY = 50
TRACEBACK_HEAD = "Traceback (most recent call last):\n"


class FailureReason(enum.StrEnum):
    """Why a run did not succeed: the `reason` of its failure record."""

    HANDLER_ERROR = "handler_error"  # the handler raised an ordinary exception
    TIMEOUT = "timeout"  # the run went past its target's timeout (`RunTimedOut`)
    DEAD_NOW = "dead_now"  # the handler raised DeadNow: a resend can never succeed
    UNREACHABLE = "unreachable"  # TargetUnreachable: nothing reached the target
    OUTCOME_UNKNOWN = "outcome_unknown"  # TargetOutcomeUnknown: the send may have landed
    LEASE_EXPIRED = "lease_expired"  # long lane: the run's lease ran out while it ran
    TAKEN_OVER = "taken_over"  # fast lane: in flight when its partition was taken over
    POD_DIED = "pod_died"  # long lane: the pod running it died (its liveness token freed)
    STOPPED = "stopped"  # long lane: a stopping pod gave the run back (no attempt spent)
    UNKNOWN = "unknown"  # an event written before failure records, without its reason


#: the reason an exception class stands for; any other exception is `handler_error`.
#: An exception class may also name its reason itself in a `failure_reason` attribute.
_REASON_BY_CLASS: tuple[tuple[type[BaseException], FailureReason], ...] = (
    (RunTimedOut, FailureReason.TIMEOUT),
    (TargetUnreachable, FailureReason.UNREACHABLE),
    (TargetOutcomeUnknown, FailureReason.OUTCOME_UNKNOWN),
    (DeadNow, FailureReason.DEAD_NOW),
)
_REASONS = {reason.value: reason for reason in FailureReason}

#: the engine's own endings of a run, as the JobDead and JobRequeued `reason` words them
TAKEN_OVER_TEXT = "in flight when its partition was taken over"
LEASE_EXPIRED_TEXT = "lease expired while running; the first run may have finished"
POD_DIED_TEXT = "its pod died while running; the run may have finished"
#: the `reason` of the JobRequeued of a dead pod's at-least-once claim
POD_DIED_REQUEUED_TEXT = "its pod died while running"
STOPPED_TEXT = "given back by a stopping pod; no attempt spent"


def reason_named(name: object) -> FailureReason | None:
    """The reason whose value is `name`, or None."""
    return _REASONS.get(name) if isinstance(name, str) else None


def reason_of(exc: BaseException) -> FailureReason:
    """The reason a run that raised `exc` failed: its class's (`failure_reason`, or the
    table above), `handler_error` for any other exception."""
    named = reason_named(getattr(type(exc), "failure_reason", None))
    if named is not None:
        return named
    for cls, reason in _REASON_BY_CLASS:
        if isinstance(exc, cls):
            return reason
    if getattr(exc, "dead_now", False) is True:
        return FailureReason.DEAD_NOW
    return FailureReason.HANDLER_ERROR


def qualified_class(exc: BaseException) -> str:
    """`module.QualifiedName` of `exc`'s class (`builtins.KeyError`)."""
    cls = type(exc)
    return storable_text(f"{cls.__module__}.{cls.__qualname__}"[:MAX_CLASS_CHARS])


def cut_traceback(
    chunks: Sequence[str], limit: int = MAX_TRACEBACK_CHARS, *, skipped: int = 0
) -> str:
    """A traceback of at most `limit` characters from its formatted `chunks` (what
    `traceback.TracebackException.format()` yields: the heading, one chunk per frame,
    the exception's lines, the separators of a chained exception), cut at a chunk
    boundary: the last chunks (the innermost frames and the exception) are kept, and a
    line saying how many earlier ones were left out replaces the rest (`skipped`: frames
    left out before formatting, counted in that line)."""
    kept: list[str] = []
    size = 0
    for chunk in reversed(chunks):
        if size + len(chunk) > limit - 200 and kept:  # room for the heading and the note
            break
        kept.append(chunk)
        size += len(chunk)
    left_out = len(chunks) - len(kept) + skipped
    kept.reverse()
    if left_out:
        note = f"  [... {left_out} earlier frames and lines left out ...]\n"
        if kept and kept[0] == TRACEBACK_HEAD:
            kept.insert(1, note)
        else:
            kept.insert(0, TRACEBACK_HEAD + note)
    text = "".join(kept)
    if len(text) > limit:  # one chunk alone is over the limit (a huge message)
        text = text[: limit - 4] + " ...\n"
    return storable_text(text)


@fast_init
@dataclass(frozen=True, slots=True)
class Failure:
    """One failed run, as its outcome event records it under `failure`."""

    reason: FailureReason
    error_class: str | None  # None: an ending the engine decided, no exception
    message: str | None
    traceback: str | None
    attempt: int  # the run's number: the job's attempts before it, plus one
    duration_ms: float | None  # None: the engine does not know how long it ran

    def to_json(self) -> dict[str, Any]:
        return {
            "reason": self.reason.value,
            "error_class": self.error_class,
            "message": self.message,
            "traceback": self.traceback,
            "attempt": self.attempt,
            "duration_ms": round(self.duration_ms, 3) if self.duration_ms is not None else None,
        }


def engine_failure(reason: FailureReason, message: str, attempt: int) -> Failure:
    """An ending the engine decided without an answer from the handler (a lease that
    expired, a takeover): a reason and a message, no class, no traceback."""
    return Failure(reason, None, message, None, attempt, None)


# --- reading the history back ----------------------------------------------------------

#: the reason an event implies when it carries no failure record (written before it)
_IMPLIED: dict[str, FailureReason] = {
    "max_attempts": FailureReason.HANDLER_ERROR,
    "dead_now": FailureReason.DEAD_NOW,
    "unreachable": FailureReason.UNREACHABLE,
    "outcome_unknown": FailureReason.OUTCOME_UNKNOWN,
    TAKEN_OVER_TEXT: FailureReason.TAKEN_OVER,
    LEASE_EXPIRED_TEXT: FailureReason.LEASE_EXPIRED,
    POD_DIED_TEXT: FailureReason.POD_DIED,
    POD_DIED_REQUEUED_TEXT: FailureReason.POD_DIED,
}
#: the outcome an attempt's event stands for, as the history shows it
_OUTCOMES = {
    EventType.JOB_SUCCEEDED: "succeeded",
    EventType.JOB_FAILED: "failed",
    EventType.JOB_DEAD: "dead",
    EventType.JOB_DEFERRED: "deferred",
    EventType.JOB_REQUEUED: "requeued",
    EventType.JOB_CLAIMED: "reclaimed",
}


def _attempt_of(event: Event) -> dict[str, Any] | None:
    """One attempt from the event that ended it, or None when `event` ends no run (a
    mark released unsent, a first claim, an admin's or the retention's event)."""
    data: Mapping[str, Any] = event.data
    kind = event.type
    if kind not in _OUTCOMES:
        return None
    if kind == EventType.JOB_CLAIMED and not data.get("reclaimed_from"):
        return None  # a first claim starts a run; only a reclaim ends one
    if kind == EventType.JOB_DEFERRED and data.get("reason") == "not_sent":
        return None
    entry: dict[str, Any] = {
        "version": event.version,
        "at": event.at,
        "event": kind,
        "outcome": _OUTCOMES[kind],
        "reason": None,
        "error_class": None,
        "message": None,
        "traceback": None,
        "attempt": None,
        "duration_ms": data.get("duration_ms"),
        "next_run_at": data.get("next_run_at"),
        "recorded": True,  # False: a failure written before failure records existed
    }
    if kind == EventType.JOB_SUCCEEDED:
        entry["attempt"] = data.get("attempts")
        return entry
    failure = data.get("failure")
    if isinstance(failure, Mapping):
        entry.update(
            reason=failure.get("reason"),
            error_class=failure.get("error_class"),
            message=failure.get("message"),
            traceback=failure.get("traceback"),
            attempt=failure.get("attempt"),
            duration_ms=failure.get("duration_ms"),
        )
        return entry
    if kind == EventType.JOB_REQUEUED and data.get("reason") == FailureReason.STOPPED:
        # a stop cut the run short and gave the row back: no failure, no attempt spent
        entry.update(reason=FailureReason.STOPPED.value, message=STOPPED_TEXT)
        return entry
    # the old shape: the reason the event implies, the message it kept, class unknown
    said = data.get("reason")
    implied = _IMPLIED.get(said) if isinstance(said, str) else None
    if implied is None:
        implied = FailureReason.HANDLER_ERROR if kind == EventType.JOB_FAILED else None
    entry.update(
        recorded=False,
        reason=(implied or FailureReason.UNKNOWN).value,
        message=data.get("error") if data.get("error") is not None else said,
        attempt=data.get("attempts") if kind == EventType.JOB_FAILED else None,
    )
    return entry


def attempt_history(events: Iterable[Event], limit: int = MAX_HISTORY) -> list[dict[str, Any]]:
    """The runs of a job, oldest first, from its stream's events: one entry per event
    that ended a run (`version`, `at`, `event`, `outcome`, `reason`, `error_class`,
    `message`, `traceback`, `attempt`, `duration_ms`, `next_run_at`, `recorded`), the
    newest `limit` of them. Old events without a failure record (`recorded` false) show
    their implied reason and an unknown (None) class."""
    found = [entry for entry in map(_attempt_of, events) if entry is not None]
    return found[-limit:] if limit >= 0 else found
