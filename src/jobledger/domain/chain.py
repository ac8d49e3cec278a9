"""The per-stream hash chains, checked from plain rows: what `jobledger verify` runs.

A `LogRow` is an event as the auditors read it, a plain tuple
``(position, stream, version, type, data, at, actor, trace_id, prev_hash, hash)`` whose
`at` is the event's time as the hash writes it (`timeutil.iso`). Stores read the log in
this form (`LogReads.read_log_rows`) without building an `Event` per row; `event_row` makes
one from an `Event`. The hash recomputed from a row is `event_hash` of the event
(`envelope_hash` is the one implementation), so the checks are the same whichever form
the events were read in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from jobledger.domain.events import GENESIS_HASH, Actor, Event, envelope_hash
from jobledger.domain.timeutil import iso

#: (position, stream, version, type, data, at as `iso` text, actor, trace_id, prev_hash, hash)
LogRow = tuple[int | None, str, int, str, Any, str, Actor | None, str | None, str, str]
#: what the chain keeps of a stream's newest event: its version and hash
Link = tuple[int, str]


def event_row(event: Event) -> LogRow:
    return (
        event.position,
        event.stream,
        event.version,
        event.type,
        event.data,
        iso(event.at),
        event.actor,
        event.trace_id,
        event.prev_hash,
        event.hash,
    )


def chain_problems(rows: Iterable[LogRow], last: dict[str, Link]) -> list[str]:
    """Problems found in the per-stream hash chains of `rows` (in log order).

    `last` maps each stream to the link of its newest event already checked, and is
    updated in place (a log read a page at a time passes the same dict for every page):
    a stream found there continues its chain instead of starting one.

    Checks each event's own hash, that versions follow 1, 2, … within a stream, and
    that each event names its predecessor's hash. A stream's first event must be v1:
    the archive removes whole streams only, so a stream that starts above v1 lost its
    first events (a deletion the chain of what remains cannot show).
    """
    problems: list[str] = []
    for row in rows:
        _, stream, version, kind, data, at, actor, trace_id, prev_hash, digest = row
        expected = envelope_hash(stream, version, kind, data, at, actor, trace_id, prev_hash)
        previous = last.get(stream)
        if (
            expected != digest
            or (previous is None and (version != 1 or prev_hash != GENESIS_HASH))
            or (previous is not None and (version != previous[0] + 1 or prev_hash != previous[1]))
        ):
            problems += _worded(row, expected, previous)
        last[stream] = (version, digest)
    return problems


def _worded(row: LogRow, expected: str, previous: Link | None) -> list[str]:
    """What `chain_problems` reports about `row` (worded only when something is wrong)."""
    position, stream, version, _, _, _, _, _, prev_hash, digest = row
    where = f"{stream} v{version} (position {position})"
    problems: list[str] = []
    if expected != digest:
        problems.append(f"{where}: content does not match its hash")
    if previous is not None:
        if version != previous[0] + 1:
            problems.append(f"{where}: follows v{previous[0]}")
        if prev_hash != previous[1]:
            problems.append(f"{where}: prev_hash does not name v{previous[0]}")
    elif version != 1:
        problems.append(f"{where}: the stream starts here; v1..v{version - 1} are missing")
    elif prev_hash != GENESIS_HASH:
        problems.append(f"{where}: first event names a predecessor")
    return problems


def verify_chain(events: Sequence[Event], last: dict[str, Link] | None = None) -> list[str]:
    """Problems in the per-stream hash chains of `events`, in log order: the checks of
    `chain_problems` (`last`: each stream's (version, hash) already checked, updated in
    place; None: every stream starts in `events`)."""
    return chain_problems(map(event_row, events), {} if last is None else last)
