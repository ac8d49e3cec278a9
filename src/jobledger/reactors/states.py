"""The moves a lane's state machine allows, checked in one place.

Both lanes keep their state in one enum and change it only through a `Moves` table:

    MOVES = Moves({IDLE: {BUSY, STOPPING}, BUSY: {IDLE, STOPPING}, STOPPING: {STOPPED},
                   STOPPED: set()}, work={IDLE, BUSY})
    self.state = MOVES.move(self.state, BUSY, self)

A move the table does not list raises `IllegalMove`. The *work* states are those a
lane moves between while it serves; the others end it (a stop, a lost lease). A stop
is asked for from outside while the lane is anywhere in its work, so once the state is
an ending one, a move into a work state (a round that started before the stop, now
ending) leaves it where it is: the stop outlasts the work in hand.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping
from typing import Generic, TypeVar

S = TypeVar("S", bound=enum.Enum)


class IllegalMove(RuntimeError):
    """A lane asked for a move its table does not allow: a defect in the lane."""


class Moves(Generic[S]):
    def __init__(self, table: Mapping[S, Collection[S]], *, work: Collection[S]) -> None:
        self.table: dict[S, frozenset[S]] = {state: frozenset(to) for state, to in table.items()}
        self.work = frozenset(work)
        missing = {to for targets in self.table.values() for to in targets} - set(self.table)
        if missing:
            raise ValueError(
                f"states without a row in the table: {sorted(s.name for s in missing)}"
            )

    def move(self, now: S, to: S, who: object) -> S:
        """The state after asking to go from `now` to `to`: `to` when the table allows
        it; `now` when it is `to` already, or when `now` ends the lane and `to` is work.
        `who` names the lane in the error."""
        if to is now or (now not in self.work and to in self.work):
            return now
        if to not in self.table[now]:
            raise IllegalMove(f"{who}: {now.name} -> {to.name} is not a move of this lane")
        return to
