"""Request context: trace id, W3C traceparent and actor, captured at enqueue.

A web request (or any caller) sets the context; `enqueue` copies it onto the job, and
the lanes restore it — as `via: system` — while the handler runs.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from contextvars import ContextVar, Token
from dataclasses import dataclass, replace

from jobledger.domain.events import Actor
from jobledger.domain.records import fast_init


@fast_init
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
    """32 hex digits, as W3C trace context and OpenTelemetry's own generator make them
    (random, not secret: a trace id is no credential). The module's generator is
    reseeded in a forked child, so worker processes never repeat each other's ids."""
    return f"{random.getrandbits(128):032x}"


def _trace_of(trace_id: str | None, traceparent: str | None) -> str:
    """The trace id to run under: given, else the one inside `traceparent`, else new."""
    if trace_id is None and traceparent:
        parts = traceparent.split("-")
        trace_id = parts[1] if len(parts) >= 3 else None
    return trace_id or new_trace_id()


@contextlib.contextmanager
def request_context(
    *, trace_id: str | None = None, traceparent: str | None = None, actor: Actor | None = None
) -> Iterator[RequestContext]:
    """Run a block under a trace id (a new one when not given) and an actor."""
    ctx = RequestContext(_trace_of(trace_id, traceparent), traceparent, actor)
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)


_SYSTEM_ACTOR = Actor(id=None, via="system")
#: the `via: system` form of each enqueuer actor seen (actors are immutable and few)
_AS_SYSTEM: dict[Actor, Actor] = {}


def _as_system(actor: Actor | None) -> Actor:
    if actor is None:
        return _SYSTEM_ACTOR
    found = _AS_SYSTEM.get(actor)
    if found is None:
        found = replace(actor, via="system")
        if len(_AS_SYSTEM) < 4096:
            _AS_SYSTEM[actor] = found
    return found


def enter_job(
    trace_id: str | None, traceparent: str | None, actor: Actor | None
) -> Token[RequestContext | None]:
    """Open the context a handler runs in: the enqueuer's trace, its actor `via: system`.
    Undo with `leave(token)`. (The lanes' form of `job_context`: no generator per run.)"""
    return _current.set(
        RequestContext(_trace_of(trace_id, traceparent), traceparent, _as_system(actor))
    )


def leave(token: Token[RequestContext | None]) -> None:
    _current.reset(token)


@contextlib.contextmanager
def job_context(
    trace_id: str | None, traceparent: str | None, actor: Actor | None
) -> Iterator[RequestContext]:
    """The context a handler runs in: the enqueuer's trace, its actor opened `via: system`."""
    token = enter_job(trace_id, traceparent, actor)
    try:
        yield current()
    finally:
        leave(token)
