"""Converters for settings: a text (environment) or a TOML value → a Python value.

Each raises ValueError explaining what it expected; `jobledger.config.load` adds the
setting's name and where the value came from.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def as_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("expected an integer, got a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip().replace("_", ""))
        except ValueError:
            pass
    raise ValueError(f"expected an integer, got {value!r}")


def as_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("expected a number, got a boolean")
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise ValueError(f"expected a number, got {value!r}") from None
    else:
        raise ValueError(f"expected a number, got {value!r}")
    if not math.isfinite(number):
        raise ValueError(f"expected a finite number, got {value!r}")
    return number


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(f"expected on/off (or true/false, 1/0, yes/no), got {value!r}")


def as_opt_bool(value: Any) -> bool | None:
    """on/off, or None for "auto" (or an empty value): the program decides."""
    if isinstance(value, str) and value.strip().lower() in {"", "auto"}:
        return None
    return as_bool(value)


def as_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value.strip()


def as_opt_str(value: Any) -> str | None:
    text = as_str(value)
    return text or None


_FOREVER = {"", "none", "forever", "never"}


def as_opt_days(value: Any) -> float | None:
    if isinstance(value, str) and value.strip().lower() in _FOREVER:
        return None
    return as_float(value)


def split_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def as_delays(value: Any) -> tuple[float, ...]:
    items = split_list(value) if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ValueError(f"expected a list of minutes such as 1,2,4,8,16, got {value!r}")
    return tuple(as_float(item) for item in items)


def _pairs(value: Any, what: str) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return {str(k).strip(): v for k, v in value.items()}
    if not isinstance(value, str):
        raise ValueError(f"expected {what}, got {value!r}")
    result: dict[str, Any] = {}
    for part in split_list(value):
        name, sep, item = part.partition("=")
        if not sep or not name.strip() or not item.strip():
            raise ValueError(f"expected {what}, got {part!r}")
        result[name.strip()] = item.strip()
    return result


def as_code_attempts(value: Any) -> dict[str, int]:
    return {
        code: as_int(v) for code, v in _pairs(value, "code=attempts pairs such as a=3,b=5").items()
    }


def as_code_topics(value: Any) -> dict[str, str]:
    return {
        code: as_str(v) for code, v in _pairs(value, "code=topic pairs such as a=t.one").items()
    }


def as_texts(value: Any) -> tuple[str, ...]:
    """A comma-separated text, or a TOML list of texts, as a tuple of texts."""
    items = split_list(value) if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ValueError("expected a comma-separated list")
    return tuple(as_str(item).strip() for item in items)


def as_keys(value: Any) -> tuple[str, ...]:
    items = split_list(value) if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ValueError("expected a list of API keys")
    return tuple(as_str(item) for item in items)
