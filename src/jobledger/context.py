"""Request context: trace id, W3C traceparent and actor, captured at enqueue.

A web request (or any caller) sets the context; `enqueue` copies it onto the job, and
the lanes restore it — as `via: system` — while the handler runs (reference §3 `actor`).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, replace

from jobledger.domain.events import Actor


@dataclass(frozen=True, slots=True)
class RequestContext:
    trace_id: str | None = None
    traceparent: str | None = None
    actor: Actor | None = None


_EMPTY = RequestContext()
_current: ContextVar[RequestContext | None] = ContextVar("jobledger_context", default=None)


def current() -> RequestContext:
    return _current.get() or _EMPTY


def new_trace_id() -> str:
    return secrets.token_hex(16)


@contextlib.contextmanager
def request_context(
    *, trace_id: str | None = None, traceparent: str | None = None, actor: Actor | None = None
) -> Iterator[RequestContext]:
    """Run a block under a trace id (a new one when not given) and an actor."""
    if trace_id is None and traceparent:
        parts = traceparent.split("-")
        trace_id = parts[1] if len(parts) >= 3 else None
    ctx = RequestContext(trace_id or new_trace_id(), traceparent, actor)
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)


@contextlib.contextmanager
def job_context(
    trace_id: str | None, traceparent: str | None, actor: Actor | None
) -> Iterator[RequestContext]:
    """The context a handler runs in: the enqueuer's trace, its actor opened `via: system`."""
    system_actor = replace(actor, via="system") if actor else Actor(id=None, via="system")
    with request_context(trace_id=trace_id, traceparent=traceparent, actor=system_actor) as ctx:
        yield ctx
