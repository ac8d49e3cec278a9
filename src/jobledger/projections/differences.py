"""What replay reports: a read-model row that is missing, extra, or different field by
field from the row the log folds to (`replay.py`, `replay_stream.py`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

MISSING = "missing"  # the log has the row, the live read model does not
EXTRA = "extra"  # the live read model has a row the log does not explain
FIELD = "field"  # both have the row, a field differs


@dataclass(frozen=True, slots=True)
class Difference:
    model: str  # "jobs" | "schedules"
    key: str  # job id or schedule code
    kind: str  # MISSING | EXTRA | FIELD
    field: str | None = None
    live: Any = None
    rebuilt: Any = None

    def describe(self) -> str:
        if self.kind == MISSING:
            return f"{self.model} {self.key}: missing from the live read model"
        if self.kind == EXTRA:
            return f"{self.model} {self.key}: in the live read model, not in the log"
        return (
            f"{self.model} {self.key}: {self.field} is {_short(self.live)} live,"
            f" {_short(self.rebuilt)} from the log"
        )


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _row_differences(model: str, key: str, live: Any, rebuilt: Any) -> list[Difference]:
    """Field-by-field differences of two rows of the same dataclass."""
    if type(live) is not type(rebuilt) or not dataclasses.is_dataclass(live):
        return [Difference(model, key, FIELD, "row", live, rebuilt)]
    out = []
    for f in dataclasses.fields(live):
        a, b = getattr(live, f.name), getattr(rebuilt, f.name)
        if a != b:
            out.append(Difference(model, key, FIELD, f.name, a, b))
    return out


def compare_rows(model: str, live: dict[str, Any], rebuilt: dict[str, Any]) -> list[Difference]:
    """Every difference between two read models keyed alike, in key order."""
    out: list[Difference] = []
    for key in sorted(live.keys() | rebuilt.keys()):
        out += differences(model, key, live.get(key), rebuilt.get(key))
    return out


def differences(model: str, key: str, live: Any, rebuilt: Any) -> list[Difference]:
    """The differences of one key (None: no row on that side)."""
    if live is None:
        return [Difference(model, key, MISSING, rebuilt=rebuilt)]
    if rebuilt is None:
        return [Difference(model, key, EXTRA, live=live)]
    return _row_differences(model, key, live, rebuilt) if live != rebuilt else []
