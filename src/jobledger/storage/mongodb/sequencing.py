"""Log positions assigned after commit — the pure part, no I/O (decisions D15).

Business and lane transactions insert their events *without* a position (`pending`):
they write only their own documents, so two of them never write the same document.
A sequencing step, run later by whichever pod reads the log, gives the pending events
consecutive positions and raises the log's high-water mark, in one transaction that
writes the head document (the only document steps share, and the only one they
conflict on). A log reader first reads the high-water mark, then the events up to it.

The rules, each a function here so they are unit-tested without a server
(tests/unit/test_mongodb_sequencing.py):

* `order_for_positions`: the pending events of a step get positions in stream order —
  within a stream, versions ascend. Version *v+1* is only written by a transaction that
  read version *v* committed, so *v* is either positioned already or pending in the
  same snapshot; ordering by (stream, version) puts it first.
* `assign_positions`: consecutive numbers after the high-water mark, one per event the
  step read as pending. Every event it read is still pending when it writes: the step
  reads and writes in one snapshot transaction, and a step that positioned one of them
  since then wrote the head document too, so one of the two is aborted by a write
  conflict before it commits.
* `log_window`: a reader asks for positions in (after, high_water] only. Every position
  at or below a high-water mark it has read was committed with that mark, so no later
  step can add one there: a reader that saved position *p* never skips an event.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Pending:
    """An event document without a position, as a sequencing step sees it."""

    id: Any
    stream: str
    version: int


def order_for_positions(pending: Iterable[Pending]) -> list[Pending]:
    """The order in which `pending` events receive positions: each stream's versions
    ascend (a stream's events stay together; streams in name order), duplicates once."""
    unique = {p.id: p for p in pending}
    return sorted(unique.values(), key=lambda p: (p.stream, p.version))


def assign_positions(
    high_water: int, pending: Sequence[Pending]
) -> tuple[list[tuple[Any, int]], int]:
    """(event id, position) for each event of `pending`, in `order_for_positions` order
    and numbered from `high_water + 1` without gaps; and the new high-water mark."""
    assigned = [
        (event.id, high_water + n) for n, event in enumerate(order_for_positions(pending), 1)
    ]
    return assigned, high_water + len(assigned)


def log_window(after: int, high_water: int) -> tuple[int, int] | None:
    """The positions a reader that has seen up to `after` may read now: (after, high]."""
    if high_water <= after:
        return None
    return after, high_water
