"""Faster constructors for the domain's frozen, slotted dataclasses.

`@dataclass(frozen=True)` builds an `__init__` that stores each field through
`object.__setattr__`, because its own `__setattr__` refuses assignment. The lanes build
a `Job`, an `Event` and a few smaller records for every job they run, so that `__init__`
is on every job's path (decisions D30 has the drain's figures with and without it).
`fast_init` swaps in an `__init__` that writes each slot through its slot descriptor:
the same signature (checked here), the same defaults, the same instance; assignment
afterwards still raises `FrozenInstanceError`.

What is generated. For the `Outcome` record (domain/job_outcomes.py),

    @fast_init
    @dataclass(frozen=True, slots=True)
    class Outcome:
        change: Change
        label: str
        pause_target: bool = False
        dead: bool = False
        extra: dict[str, Any] = field(default_factory=dict)

`fast_init` compiles this (the underscored names are the function's globals:
`_set_<field>` is the `__set__` of that field's slot descriptor, `_default_<field>` the
field's default, `_factory_<field>` its default factory):

    def __init__(
        self,
        change,
        label,
        pause_target=_default_pause_target,
        dead=_default_dead,
        extra=_NO_VALUE,
    ):
        _set_change(self, change)
        _set_label(self, label)
        _set_pause_target(self, pause_target)
        _set_dead(self, dead)
        if extra is _NO_VALUE: extra = _factory_extra()
        _set_extra(self, extra)

where the dataclass's own `__init__` runs `object.__setattr__(self, 'change', change)`
and so on (tests/unit/test_records.py checks this text against the real output). The
source stays readable at run time: `inspect.getsource(Outcome.__init__)` returns it, and
a traceback through it shows its lines (`compile_generated` registers it with
`linecache` as `<fast_init Outcome>`).
"""

from __future__ import annotations

import dataclasses
import inspect
import linecache
from typing import Any, TypeVar

T = TypeVar("T")

_NO_VALUE = object()


def compile_generated(source: str, namespace: dict[str, Any], name: str, label: str) -> Any:
    """Run `source` (one `def name`) in `namespace` and return the function, registered
    with `linecache` under the file name `<label>` so that `inspect.getsource` and
    tracebacks show the generated lines instead of nothing."""
    filename = f"<{label}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


def init_source(cls: type) -> tuple[str, dict[str, Any]]:
    """The source of `cls`'s fast `__init__` and the globals it runs with."""
    namespace: dict[str, Any] = {"_NO_VALUE": _NO_VALUE}
    params: list[str] = []
    lines: list[str] = []
    for f in dataclasses.fields(cls):
        namespace[f"_set_{f.name}"] = cls.__dict__[f.name].__set__  # the slot descriptor
        if f.default is not dataclasses.MISSING:
            namespace[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_NO_VALUE")
            lines.append(f"    if {f.name} is _NO_VALUE: {f.name} = _factory_{f.name}()")
        else:
            params.append(f.name)
        lines.append(f"    _set_{f.name}(self, {f.name})")
    head = "".join(f"    {param},\n" for param in ["self", *params])
    source = f"def __init__(\n{head}):\n" + "\n".join(lines) + "\n"
    return source, namespace


def fast_init(cls: type[T]) -> type[T]:
    """Class decorator, above `@dataclass(frozen=True, slots=True)`."""
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"fast_init: {cls.__name__} has a __post_init__")
    plain = cls.__init__
    source, namespace = init_source(cls)
    init = compile_generated(source, namespace, "__init__", f"fast_init {cls.__qualname__}")
    before = [(p.name, p.kind) for p in inspect.signature(plain).parameters.values()]
    after = [(p.name, p.kind) for p in inspect.signature(init).parameters.values()]
    if before != after:
        raise TypeError(f"fast_init: {cls.__name__}'s signature would change")
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    setattr(cls, "__init__", init)  # noqa: B010 - replacing a method, by design
    return cls
