"""What each setting is: how its value is read and checked, what it means, and the
environment variables that set it.

The `Settings` dataclass is the one source: each field carries its `Spec` in its
metadata (`field(default=…, metadata=setting(convert, check, doc))`), and `specs`
reads them back in field order. A field added without one fails at import, naming it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_KEY = "jobledger.setting"


@dataclass(frozen=True, slots=True)
class Spec:
    name: str
    convert: Callable[[Any], Any]
    check: Callable[[Any], str | None] | None
    doc: str
    aliases: tuple[str, ...] = ()  # the reference's own env names, after JOBLEDGER_<NAME>
    secret: bool = False

    @property
    def env(self) -> tuple[str, ...]:
        return (f"JOBLEDGER_{self.name.upper()}", *self.aliases)


def setting(
    convert: Callable[[Any], Any],
    check: Callable[[Any], str | None] | None,
    doc: str,
    *,
    aliases: tuple[str, ...] = (),
    secret: bool = False,
) -> Mapping[str, Spec]:
    """A `Settings` field's metadata: its spec (named after the field by `specs`)."""
    return {_KEY: Spec("", convert, check, doc, aliases, secret)}


def specs(settings: type[Any]) -> tuple[Spec, ...]:
    """The spec of every field of the `settings` dataclass, in field order."""
    found = []
    for f in dataclasses.fields(settings):
        if _KEY not in f.metadata:
            raise TypeError(f"{settings.__name__}.{f.name} needs metadata=setting(...)")
        found.append(dataclasses.replace(f.metadata[_KEY], name=f.name))
    return tuple(found)
