"""Event data shown in the page's tables: labelled fields an operator reads at a
glance (`event_fields`), and times as the page writes them (`when`)."""

from __future__ import annotations

import json
from typing import Any


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


#: event data fields shown first, in this order; the others follow by name
_FIRST = ("reason", "attempts", "error", "next_run_at", "token", "pod", "lease_until")
#: of a failure record, what the history row shows (the message is the event's `error`,
#: the traceback is in the attempts table)
_FAILURE_SHOWN = ("attempt", "reason", "error_class", "duration_ms")
_TIME_KEYS = ("_at", "_until", "run_at")
_ORDER = {key: n for n, key in enumerate(_FIRST)}


def when(value: str | None) -> str:
    """An ISO time as the page writes it: `2026-12-07 10:00:00Z` (— when unset)."""
    if not value:
        return "—"
    return value.replace("T", " ").replace(".000Z", "Z")


def _field_text(key: str, value: Any) -> str:
    if isinstance(value, str) and key.endswith(_TIME_KEYS):
        return when(value)
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return f"{value:g}"
    return _dump(value)


def event_fields(data: Any) -> list[tuple[str, str]]:
    """An event's data as (label, text) pairs an operator reads at a glance: `next run
    at 2026-12-07 10:00:00Z`, `attempt 2`, `error class builtins.KeyError`. Empty values
    are left out; a failure record shows its attempt, reason, class and duration (and
    its message when the event has no `error`); nested values are compact JSON."""
    if not isinstance(data, dict):
        return [("data", _dump(data))]
    out: list[tuple[str, str]] = []
    for key in sorted(data, key=lambda k: (_ORDER.get(str(k), len(_ORDER)), str(k))):
        value = data[key]
        if key == "failure" and isinstance(value, dict):
            shown = [*_FAILURE_SHOWN, *(("message",) if data.get("error") is None else ())]
            for name in shown:
                item = value.get(name)
                if item is not None and item != "":
                    label = "error class" if name == "error_class" else name.replace("_", " ")
                    out.append((label, _field_text(name, item)))
            continue
        if value is None or value == "" or value == {}:
            continue
        out.append((str(key).replace("_", " "), _field_text(str(key), value)))
    return out
