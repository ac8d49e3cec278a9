"""Events: the only thing the engine ever writes about a job or a schedule.

An event belongs to one stream (`job:<id>` or `schedule:<code>`), has a version that
is unique within it (1, 2, …), and carries the hash of its predecessor so that an
auditor can detect an edited or deleted event (`jobledger verify`). The global
position is assigned by the store when the event commits.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from jobledger.domain.records import fast_init
from jobledger.domain.timeutil import at_ms, iso

GENESIS_HASH = ""


class EventType:
    """Every event type, by stream. docs/events.md explains each for auditors."""

    # job streams
    JOB_ENQUEUED = "JobEnqueued"
    JOB_DISPATCHED = "JobDispatched"  # fast lane in-flight mark (at-most-once)
    JOB_CLAIMED = "JobClaimed"  # long lane reservation under a claim token
    JOB_LEASE_RENEWED = "JobLeaseRenewed"
    JOB_SUCCEEDED = "JobSucceeded"
    JOB_FAILED = "JobFailed"  # answered failure, retry scheduled
    JOB_DEFERRED = "JobDeferred"  # target unreachable, no attempt spent
    JOB_REQUEUED = "JobRequeued"  # in-flight mark dropped on takeover (at-least-once)
    JOB_REDELIVERED = "JobRedelivered"  # a run whose outcome lost to another's (takeover)
    JOB_DEAD = "JobDead"
    JOB_RETRIED = "JobRetried"  # admin: DEAD → PENDING
    JOB_SKIPPED = "JobSkipped"  # admin skip of a DEAD row, or a late schedule slot
    JOB_CANCELLED = "JobCancelled"  # admin: PENDING → gone
    JOB_EXPIRED = "JobExpired"  # retention: DEAD row removed after its period
    # schedule streams
    SCHEDULE_DECLARED = "ScheduleDeclared"
    SCHEDULE_SYNCED = "ScheduleSynced"
    SCHEDULE_ENABLED = "ScheduleEnabled"
    SCHEDULE_DISABLED = "ScheduleDisabled"
    SCHEDULE_OVERRIDE_SET = "ScheduleCronOverrideSet"
    SCHEDULE_OVERRIDE_CLEARED = "ScheduleCronOverrideCleared"
    SCHEDULE_SLOT_ENQUEUED = "ScheduleSlotEnqueued"
    SCHEDULE_SLOTS_MISSED = "ScheduleSlotsMissed"
    SCHEDULE_SLOT_SKIPPED = "ScheduleSlotSkipped"
    SCHEDULE_SLOT_RAN = "ScheduleSlotRan"


@dataclass(frozen=True, slots=True)
class Actor:
    """Who caused an event. `via` is `http`, `system`, `api`, … ."""

    id: str | None = None
    via: str = "system"
    role: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "via": self.via, "role": self.role}

    @staticmethod
    def from_json(data: Mapping[str, Any] | None) -> Actor | None:
        if data is None:
            return None
        return Actor(id=data.get("id"), via=data.get("via", "system"), role=data.get("role"))


SYSTEM = Actor(id="jobledger", via="system")


@fast_init
@dataclass(frozen=True, slots=True)
class Event:
    stream: str
    version: int
    type: str
    data: Mapping[str, Any]
    at: datetime
    actor: Actor | None
    trace_id: str | None
    prev_hash: str
    hash: str
    position: int | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        """The export form (JSON Lines for auditors)."""
        return {
            "position": self.position,
            "stream": self.stream,
            "version": self.version,
            "type": self.type,
            "data": dict(self.data),
            "at": iso(self.at),
            "actor": self.actor.to_json() if self.actor else None,
            "trace_id": self.trace_id,
            "prev_hash": self.prev_hash,
            "hash": self.hash,
        }

    def json_line(self) -> str:
        """One line of an export or archive file (JSON Lines, keys sorted)."""
        return json.dumps(self.to_json(), sort_keys=True, ensure_ascii=False) + "\n"


#: the canonical form: sorted keys, no spaces, UTF-8 kept. Event data is plain JSON,
#: checked when it enters the engine, so the encoder keeps no circular-reference markers
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, check_circular=False
)


def canonical_json(value: Any) -> str:
    """Deterministic JSON: sorted keys, no spaces, UTF-8 kept."""
    return _CANONICAL.encode(value)


def _orjson_writes_the_same(value: Any) -> bool:
    """Whether orjson's sorted compact text of `value` is `canonical_json(value)`'s.

    True for plain JSON built of exact `dict` (string keys), `list`, `str`, `bool`,
    `None`, integers within 64 bits and floats that `repr` writes without an exponent
    (0 and 1e-4 <= |x| < 1e16; orjson writes the others in other forms). Anything else
    goes to the standard encoder. Pinned by property tests of `event_hash`.
    """
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        number: int = value
        return -(1 << 63) <= number < (1 << 64)
    if kind is float:
        size: float = abs(value)
        return size == 0.0 or 1e-4 <= size < 1e16
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                return False
            item_kind = type(item)
            if item_kind is str or item is None or item_kind is bool:
                continue
            if item_kind is int:  # the common nested scalars without a call each
                if not -(1 << 63) <= item < (1 << 64):
                    return False
            elif item_kind is float:  # a duration: the same test as a float's above
                item_size: float = abs(item)
                if not (item_size == 0.0 or 1e-4 <= item_size < 1e16):
                    return False
            elif not _orjson_writes_the_same(item):
                return False
        return True
    if kind is list:
        return all(_orjson_writes_the_same(item) for item in value)
    return False


#: each actor's JSON form in a hash and whether orjson writes it canonically (actors are
#: immutable and few: the system actor signs most events)
_HASHED_ACTORS: dict[Actor, tuple[dict[str, Any], bool]] = {}


def _hashed_actor(actor: Actor | None) -> tuple[dict[str, Any] | None, bool]:
    if actor is SYSTEM:  # most events: no dataclass hash and equality of the lookup
        return _SYSTEM_HASHED
    if actor is None:
        return None, True
    found = _HASHED_ACTORS.get(actor)
    if found is None:
        form = actor.to_json()
        found = (form, _orjson_writes_the_same(form))
        if len(_HASHED_ACTORS) < 4096:
            _HASHED_ACTORS[actor] = found
    return found


_SYSTEM_FORM = SYSTEM.to_json()
_SYSTEM_HASHED: tuple[dict[str, Any] | None, bool] = (
    _SYSTEM_FORM,
    _orjson_writes_the_same(_SYSTEM_FORM),
)


def actor_json(actor: Actor | None) -> dict[str, Any] | None:
    """`actor.to_json()`, one shared dict per actor: read it, never change it (the
    adapters encode one per event they store)."""
    return _hashed_actor(actor)[0]


def event_hash(
    *,
    stream: str,
    version: int,
    type: str,  # noqa: A002 - the event's field name
    data: Mapping[str, Any],
    at: datetime,
    actor: Actor | None,
    trace_id: str | None,
    prev_hash: str,
) -> str:
    return envelope_hash(stream, version, type, data, iso(at), actor, trace_id, prev_hash)


def envelope_hash(
    stream: str,
    version: int,
    kind: str,
    data: Mapping[str, Any],
    at: str,
    actor: Actor | None,
    trace_id: str | None,
    prev_hash: str,
) -> str:
    """`event_hash` with the time already written as `timeutil.iso` writes it (the
    auditors' rows carry it so: `domain.chain`)."""
    actor_form, plain_actor = _hashed_actor(actor)
    envelope = {
        "stream": stream,
        "version": version,
        "type": kind,
        "data": data,
        "at": at,
        "actor": actor_form,
        "trace_id": trace_id,
        "prev": prev_hash,
    }
    # orjson where that is the canonical text: only `data` and the actor are not plain
    # text (or a version number) by their type
    fast = plain_actor and _orjson_writes_the_same(data)
    try:
        body = orjson.dumps(envelope, option=orjson.OPT_SORT_KEYS) if fast else b""
    except orjson.JSONEncodeError:  # lone surrogates: fail as the standard encoder does
        body = b""
    if not body:
        body = canonical_json(envelope).encode()
    return hashlib.sha256(body).hexdigest()


def new_event(
    stream: str,
    version: int,
    type: str,  # noqa: A002
    data: Mapping[str, Any],
    *,
    at: datetime,
    actor: Actor | None,
    trace_id: str | None,
    prev_hash: str,
) -> Event:
    at = at_ms(at)
    digest = envelope_hash(stream, version, type, data, iso(at), actor, trace_id, prev_hash)
    return Event(stream, version, type, data, at, actor, trace_id, prev_hash, digest)
