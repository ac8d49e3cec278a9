"""The lanes' state tables: moves are checked, a stop outlasts the work in hand, every
state is reachable, and docs/lanes.md draws exactly the moves the code allows."""

from __future__ import annotations

import enum
import importlib
import re
from pathlib import Path
from typing import Any

import pytest

from jobledger.reactors import fast_states, long_lane
from jobledger.reactors.states import IllegalMove, Moves

DOCS = Path(__file__).resolve().parents[2] / "docs" / "lanes.md"


class S(enum.Enum):
    IDLE = 1
    BUSY = 2
    STOPPING = 3
    STOPPED = 4


MOVES = Moves(
    {
        S.IDLE: {S.BUSY, S.STOPPING},
        S.BUSY: {S.IDLE, S.STOPPING},
        S.STOPPING: {S.STOPPED},
        S.STOPPED: (),
    },
    work={S.IDLE, S.BUSY},
)


def test_a_listed_move_is_made_and_an_unlisted_one_raises() -> None:
    assert MOVES.move(S.IDLE, S.BUSY, "t") is S.BUSY
    assert MOVES.move(S.BUSY, S.BUSY, "t") is S.BUSY  # staying is no move
    with pytest.raises(IllegalMove, match="t: IDLE -> STOPPED"):
        MOVES.move(S.IDLE, S.STOPPED, "t")
    with pytest.raises(IllegalMove):
        MOVES.move(S.STOPPED, S.STOPPING, "t")


def test_a_stop_outlasts_the_work_in_hand() -> None:
    """A round that started before the stop ends with a move into a work state: the
    lane stays stopping."""
    assert MOVES.move(S.STOPPING, S.IDLE, "t") is S.STOPPING
    assert MOVES.move(S.STOPPED, S.BUSY, "t") is S.STOPPED


def test_a_table_naming_a_state_without_its_own_row_is_refused() -> None:
    with pytest.raises(ValueError, match="STOPPED"):
        Moves({S.IDLE: {S.STOPPED}}, work={S.IDLE})


@pytest.mark.parametrize(
    ("moves", "start"),
    [(fast_states.MOVES, fast_states.IDLE), (long_lane._MOVES, long_lane.IDLE)],
    ids=["partition worker", "long lane"],
)
def test_every_state_is_reachable_and_every_ending_is_final(moves: Moves[Any], start: Any) -> None:
    seen, todo = {start}, [start]
    while todo:
        for to in moves.table[todo.pop()]:
            if to not in seen:
                seen.add(to)
                todo.append(to)
    assert seen == set(moves.table)
    finals = [state for state, to in moves.table.items() if not to]
    assert finals and all(state not in moves.work for state in finals)


def _drawn() -> dict[str, set[tuple[str, str]]]:
    """The moves each `<!-- states: module.NAME -->` diagram of docs/lanes.md draws; an
    edge from a composite state (`state Serving { … }`) stands for each state in it."""
    text = DOCS.read_text()
    found: dict[str, set[tuple[str, str]]] = {}
    for match in re.finditer(r"<!-- states: (\S+) -->\n```mermaid\n(.*?)```", text, re.S):
        inside: dict[str, set[str]] = {}
        current: str | None = None
        edges: list[tuple[str, str]] = []
        for line in match.group(2).splitlines():
            line = line.strip()
            if opened := re.match(r"state (\w+) \{", line):
                current = opened.group(1)
                inside[current] = set()
            elif line == "}":
                current = None
            elif edge := re.match(r"(\S+) --> (\S+?)(:|$)", line):
                a, b = edge.group(1), edge.group(2)
                if "[*]" in (a, b):
                    continue
                edges.append((a, b))
                if current is not None:
                    inside[current].update((a, b))
        drawn: set[tuple[str, str]] = set()
        for a, b in edges:
            drawn.update((s, b) for s in inside.get(a, {a}))
        found[match.group(1)] = drawn
    return found


def test_the_docs_draw_exactly_the_moves_of_each_table() -> None:
    drawn = _drawn()
    assert set(drawn) == {
        "jobledger.reactors.fast_states.MOVES",
        "jobledger.reactors.long_lane._MOVES",
    }
    for path, edges in drawn.items():
        module, name = path.rsplit(".", 1)
        moves: Moves[Any] = getattr(importlib.import_module(module), name)
        table = {(a.name, b.name) for a, to in moves.table.items() for b in to}
        assert edges == table, (path, edges ^ table)
