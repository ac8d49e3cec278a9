"""What `App.target` does to a handler before the registry sees it.

* A plain `def` runs in a worker thread (`core.registry.as_async`); an `async def` (or
  an object with an `async def __call__`) is called as it is.
* A typed payload (a dataclass, or a pydantic model when pydantic is installed) is
  validated at enqueue (`PayloadType.encode`: the object or a dict becomes plain JSON
  data, or `InvalidArgument` names what is wrong) and rebuilt for the handler
  (`PayloadType.decode`). The handler then receives `(payload)` or `(payload, job)`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import typing
from collections.abc import Awaitable, Callable
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
            if not isinstance(data, dict):
                raise TypeError(f"expected an object, got {type(data).__name__}")
            return self.cls(**data)
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
