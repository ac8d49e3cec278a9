"""What `App.target` does to a handler before the registry sees it.

* A plain `def` runs in a worker thread (`core.registry.as_async`); an `async def` (or
  an object with an `async def __call__`) is called as it is.
* A typed payload (a dataclass, or a pydantic model when pydantic is installed) is
  validated at enqueue (`PayloadType.encode`: the object or a dict becomes plain JSON
  data, or `InvalidArgument` names what is wrong) and rebuilt for the handler
  (`PayloadType.decode`). The handler then receives `(payload)` or `(payload, job)`.
  A dataclass's fields get back the types the payload codec wrote as JSON
  (`domain.enqueue_rules.plain_payload`): `datetime`, `date`, `time` from ISO-8601,
  `Decimal` and `UUID` from text, an `Enum` from its value, nested dataclasses, and
  lists, tuples and dicts of them, as the field annotations say.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import functools
import inspect
import types
import typing
import uuid
from collections import abc
from collections.abc import Awaitable, Callable
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

from jobledger.core.registry import is_async_handler
from jobledger.domain.errors import InvalidArgument
from jobledger.domain.jobs import Job

AsyncHandler = Callable[[Job], Awaitable[object]]


class PayloadType:
    """Validation at enqueue and reconstruction at run for one payload class."""

    def __init__(self, cls: type[Any]) -> None:
        self.cls = cls
        self.pydantic = hasattr(cls, "model_validate") and hasattr(cls, "model_dump")
        if not self.pydantic and not dataclasses.is_dataclass(cls):
            raise InvalidArgument(
                f"payload type {cls.__name__}: expected a dataclass or a pydantic model"
            )

    def decode(self, data: Any) -> Any:
        try:
            if self.pydantic:
                return self.cls.model_validate(data)
            return typed_value(self.cls, data)
        except Exception as exc:
            raise InvalidArgument(
                f"payload does not fit {self.cls.__name__}: {_first_line(exc)}"
            ) from exc

    def encode(self, value: Any) -> Any:
        """Plain JSON data for `value` (an instance, or a dict that must fit the class)."""
        if not isinstance(value, self.cls):
            value = self.decode(value)
        if self.pydantic:
            return value.model_dump(mode="json")
        return dataclasses.asdict(value)


@functools.cache
def _field_hints(cls: type) -> dict[str, Any]:
    """A dataclass's resolved field annotations, read once per class (decoding runs for
    every job); an annotation that does not resolve leaves the fields as they are."""
    try:
        return typing.get_type_hints(cls)
    except Exception:
        return {}


def typed_value(hint: Any, data: Any) -> Any:
    """`data` (JSON data) rebuilt as the annotation `hint` says: the inverse of the
    payload codec for the types it writes; other annotations take `data` as it is."""
    if data is None or hint is Any:
        return data
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        return _first_fit([a for a in args if a is not type(None)], data)
    if origin in (list, set, frozenset, tuple, abc.Sequence, abc.Set):
        items = [typed_value(_item_hint(args, i), v) for i, v in enumerate(_listed(data))]
        return _COLLECTIONS.get(origin, list)(items)
    if origin in (dict, abc.Mapping) and isinstance(data, dict):
        value_hint = args[1] if len(args) == 2 else Any
        return {k: typed_value(value_hint, v) for k, v in data.items()}
    if not isinstance(hint, type):
        return data
    if dataclasses.is_dataclass(hint):
        if not isinstance(data, dict):
            raise TypeError(f"expected an object, got {type(data).__name__}")
        hints = _field_hints(hint)
        return hint(**{k: typed_value(hints.get(k, Any), v) for k, v in data.items()})
    if issubclass(hint, enum.Enum):
        return hint(data)
    parse = _PARSERS.get(hint)
    if parse is not None and isinstance(data, str):
        return parse(data)
    return data


#: how a list of JSON data becomes the collection an annotation names
_COLLECTIONS: dict[Any, Callable[[list[Any]], Any]] = {
    tuple: tuple,
    set: set,
    frozenset: frozenset,
    abc.Set: frozenset,
}

#: the types the codec writes as text, and how the text is read back (datetime before date:
#: a datetime is a date)
_PARSERS: dict[type[Any], Callable[[str], Any]] = {
    datetime: datetime.fromisoformat,
    date: date.fromisoformat,
    time: time.fromisoformat,
    Decimal: Decimal,
    uuid.UUID: uuid.UUID,
}


def _first_fit(hints: list[Any], data: Any) -> Any:
    """`data` as the first of a union's members it fits (`data` itself when none does)."""
    for hint in hints:
        try:
            return typed_value(hint, data)
        except (TypeError, ValueError, ArithmeticError):
            continue
    return data


def _listed(data: Any) -> list[Any]:
    if not isinstance(data, list):
        raise TypeError(f"expected a list, got {type(data).__name__}")
    return data


def _item_hint(args: tuple[Any, ...], index: int) -> Any:
    """The annotation of item `index` of a list, set or tuple annotated with `args`."""
    if not args:
        return Any
    if len(args) == 2 and args[1] is Ellipsis:  # tuple[X, ...]
        return args[0]
    return args[index] if index < len(args) else args[-1]


def _first_line(exc: Exception) -> str:
    return (str(exc) or type(exc).__name__).splitlines()[0]


def payload_type_of(fn: Callable[..., Any]) -> type[Any] | None:
    """The class the handler's first parameter is annotated with, when it is a
    dataclass or a pydantic model (not `Job`)."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        return None
    params = list(inspect.signature(fn).parameters)
    if not params:
        return None
    hint = hints.get(params[0])
    if not isinstance(hint, type) or hint is Job:
        return None
    if dataclasses.is_dataclass(hint) or hasattr(hint, "model_validate"):
        return hint
    return None


def typed_handler(fn: Callable[..., Any], payload: PayloadType) -> AsyncHandler:
    """A job handler calling `fn(payload)` or `fn(payload, job)` with the rebuilt payload
    (on the loop for an `async def`, in a worker thread for a plain `def`)."""
    is_async = is_async_handler(fn)
    with_job = len(inspect.signature(fn).parameters) >= 2

    async def run(job: Job) -> object:
        value = payload.decode(job.payload)
        args = (value, job) if with_job else (value,)
        if is_async:
            return await fn(*args)
        result = await asyncio.to_thread(fn, *args)
        return await result if inspect.isawaitable(result) else result

    run.__name__ = getattr(fn, "__name__", "handler")
    run.__qualname__ = getattr(fn, "__qualname__", run.__name__)
    return run


async def _no_handler_placeholder(job: Job) -> None:  # pragma: no cover - never started
    raise RuntimeError(f"target {job.target!r} has no handler in this process")


def no_handler() -> AsyncHandler:
    """The handler of a target declared for enqueue only (`App.declare_target`)."""
    return _no_handler_placeholder
