"""fast_init: the same constructor as the dataclass's, only quicker."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import textwrap
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

import jobledger
from jobledger.domain import records
from jobledger.domain.events import SYSTEM, Event
from jobledger.domain.job_outcomes import Outcome, Result, RunResult
from jobledger.domain.jobs import Change, Job, JobStatus, Lane, Stamp
from jobledger.domain.records import fast_init, init_source

AT = datetime(2026, 11, 29, tzinfo=UTC)


def test_arguments_defaults_and_factories_are_the_dataclasses() -> None:
    event = Event("job:x", 1, "JobEnqueued", {"a": 1}, AT, SYSTEM, None, "", "h")
    assert event.position is None and event.hash == "h"
    assert (
        Event("job:x", 1, "JobEnqueued", {"a": 1}, AT, SYSTEM, None, "", "h", position=7).position
        == 7
    )
    change = Change("job:x", 0, (event,), None)
    assert (change.dedupe_key, change.partition) == (None, None)
    first, second = Outcome(change, "ok"), Outcome(change, "ok")
    assert first.extra == {} and first.extra is not second.extra  # a new dict each
    assert RunResult(Result.OK) == RunResult(result=Result.OK)
    assert Stamp(AT) == Stamp(at=AT, actor=None, trace_id=None)
    job = Job(
        "i", "c", "t", Lane.FAST, None, 1, 0, None, "d", JobStatus.PENDING, 0, AT, AT, AT, 1, "h"
    )
    assert job.closed_at is None and job.headers is None
    assert dataclasses.replace(job, attempts=2).attempts == 2


def test_instances_stay_frozen_and_bad_calls_still_fail() -> None:
    stamp = Stamp(AT)
    with pytest.raises(dataclasses.FrozenInstanceError):
        stamp.at = AT  # type: ignore[misc]
    with pytest.raises(TypeError):
        Stamp()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Stamp(AT, unknown=1)  # type: ignore[call-arg]


def test_a_class_it_cannot_copy_is_refused() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            pass

    with pytest.raises(TypeError, match="__post_init__"):
        fast_init(Checked)


# --- the generated code, against the plain dataclass constructor ----------------------

SRC = Path(jobledger.__file__).parent


def decorated_classes() -> list[type]:
    """Every class in src/jobledger under `@fast_init` (its module imported here)."""
    found: list[type] = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = [
            node.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef)
            and any(isinstance(d, ast.Name) and d.id == "fast_init" for d in node.decorator_list)
        ]
        if names:
            parts = path.relative_to(SRC.parent).with_suffix("").parts
            module = importlib.import_module(".".join(parts))
            found.extend(getattr(module, name) for name in names)
    return found


CLASSES = decorated_classes()


def plain_init(cls: type) -> Callable[..., None]:
    """The `__init__` `@dataclass(frozen=True, slots=True)` writes for `cls`'s fields (the
    one `fast_init` replaced), from a twin class made without `fast_init`."""
    spec: list[tuple[str, object, object]] = []
    for f in dataclasses.fields(cls):
        options: dict[str, object] = {}
        if f.default is not dataclasses.MISSING:
            options["default"] = f.default
        if f.default_factory is not dataclasses.MISSING:
            options["default_factory"] = f.default_factory
        spec.append((f.name, f.type, dataclasses.field(**options)))  # type: ignore[call-overload]
    twin = dataclasses.make_dataclass(cls.__name__, spec, frozen=True, slots=True)  # type: ignore[arg-type]
    init: Callable[..., None] = twin.__init__
    return init


def test_every_decorated_class_is_found_and_generated() -> None:
    assert {c.__name__ for c in CLASSES} >= {"Job", "Event", "Change", "Outcome", "Stamp"}
    for cls in CLASSES:
        init = cls.__init__  # type: ignore[misc]
        assert init.__code__.co_filename == f"<fast_init {cls.__qualname__}>"


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_the_generated_constructor_is_the_plain_one(cls: type) -> None:
    plain = plain_init(cls)
    fast = cls.__init__  # type: ignore[misc]
    assert fast is not plain
    fields = dataclasses.fields(cls)
    # the same parameters: names, kinds and defaults (a factory's marker differs by design)
    plain_params = list(inspect.signature(plain).parameters.values())
    fast_params = list(inspect.signature(fast).parameters.values())
    assert [(p.name, p.kind) for p in fast_params] == [(p.name, p.kind) for p in plain_params]
    for f, param in zip(fields, fast_params[1:], strict=True):
        if f.default is not dataclasses.MISSING:
            assert param.default is f.default is plain_params[fast_params.index(param)].default
        elif f.default_factory is not dataclasses.MISSING:
            assert param.default is not inspect.Parameter.empty
        else:
            assert param.default is inspect.Parameter.empty

    def both(*args: object, **kwargs: object) -> tuple[object, object]:
        built = cls(*args, **kwargs)
        other = object.__new__(cls)
        plain(other, *args, **kwargs)
        return built, other

    # every field passed, by position and by keyword: the very same values stored
    values = {f.name: object() for f in fields}
    for built, other in (both(*values.values()), both(**values)):
        for f in fields:
            assert getattr(built, f.name) is values[f.name] is getattr(other, f.name)
        assert built == other
    # only the required fields: defaults are the same objects, factories make equal new ones
    required = {f.name: values[f.name] for f in fields if _required(f)}
    built, other = both(**required)
    again, _ = both(**required)
    for f in fields:
        mine, theirs = getattr(built, f.name), getattr(other, f.name)
        if f.default_factory is not dataclasses.MISSING:
            assert mine == theirs and type(mine) is type(theirs)
            if isinstance(mine, (dict, list, set)):
                assert mine is not getattr(again, f.name)  # a new one per instance
        else:
            assert mine is theirs
    # the same refusals, and the instance stays frozen
    if required:
        first = next(iter(required))
        missing = {k: v for k, v in required.items() if k != first}
        for call in (lambda: cls(**missing), lambda: plain(object.__new__(cls), **missing)):
            with pytest.raises(TypeError, match=first):
                call()
    for call in (lambda: cls(**required, unknown=1), lambda: both(**required, unknown=1)):
        with pytest.raises(TypeError, match="unknown"):
            call()
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(built, fields[0].name, None)


def _required(f: dataclasses.Field[object]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def test_the_module_docstring_shows_the_code_generated_for_outcome() -> None:
    doc = records.__doc__ or ""
    start = doc.index("    def __init__(")
    end = doc.index("\n\n", start)
    shown = textwrap.dedent(doc[start:end]) + "\n"
    assert shown == init_source(Outcome)[0]


def test_the_generated_source_is_readable_at_run_time() -> None:
    assert inspect.getsource(Outcome.__init__) == init_source(Outcome)[0]

    def fail() -> list[int]:
        raise RuntimeError("factory failed")

    @fast_init
    @dataclasses.dataclass(frozen=True, slots=True)
    class Built:
        a: int
        b: list[int] = dataclasses.field(default_factory=fail)

    with pytest.raises(RuntimeError) as caught:
        Built(1)
    shown = "".join(traceback.format_exception(caught.value))
    assert "<fast_init " in shown and "if b is _NO_VALUE: b = _factory_b()" in shown
