"""Load `Settings` from defaults, an optional TOML file and the environment, and validate it.

Precedence, lowest first: the reference's defaults (`jobledger.config.settings.Settings`), the
config file (`file=` / `--config`, else `JOBLEDGER_CONFIG`), then environment variables
(`JOBLEDGER_<NAME>`, plus the reference's own names `JOBS_WORKERS`, `KAFKA_TARGET_TOPICS`
and `QUEUE_REDIS_URL`; when both spellings are set the `JOBLEDGER_` one wins).

Everything is checked at start-up: a bad value raises `ConfigError` naming the setting,
where the value came from and what is wrong, so a pod refuses to start instead of
misbehaving later. docs/configuration.md lists every setting.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from jobledger.config.settings import Settings
from jobledger.config.spec import Spec, specs
from jobledger.domain.errors import ConfigError

CONFIG_ENV = "JOBLEDGER_CONFIG"
DEFAULT = "default"

SPECS = specs(Settings)
BY_NAME = {spec.name: spec for spec in SPECS}
FIELDS = set(BY_NAME)


# --- resolution ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Resolved:
    value: Any
    source: str  # "default" | "file:<path>" | "env:<VAR>"
    raw: Any = None

    def where(self, name: str) -> str:
        if self.source.startswith("env:"):
            return f"{name} (env {self.source[4:]}={self.raw!r})"
        if self.source.startswith("file:"):
            return f"{name} (file {self.source[5:]}, key {name!r} = {self.raw!r})"
        return f"{name} (default)"


def _read_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"config file {path}: not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    section = data.get("jobledger", data)
    if not isinstance(section, dict):
        raise ConfigError(f"config file {path}: [jobledger] must be a table")
    unknown = sorted(set(section) - FIELDS)
    if unknown:
        hints = difflib.get_close_matches(unknown[0], sorted(FIELDS), n=1)
        hint = f" (did you mean {hints[0]!r}?)" if hints else ""
        raise ConfigError(f"config file {path}: unknown setting {unknown[0]!r}{hint}")
    return section


def _resolve(
    env: Mapping[str, str] | None, file: str | os.PathLike[str] | None
) -> dict[str, _Resolved]:
    env = os.environ if env is None else env
    path_text = os.fspath(file) if file is not None else env.get(CONFIG_ENV) or None
    from_file = _read_file(Path(path_text)) if path_text else {}
    defaults = Settings()
    resolved: dict[str, _Resolved] = {}
    for spec in SPECS:
        current = _Resolved(getattr(defaults, spec.name), DEFAULT)
        if spec.name in from_file:
            current = _convert(spec, from_file[spec.name], f"file:{path_text}")
        for var in spec.env:
            if var in env:
                current = _convert(spec, env[var], f"env:{var}")
                break
        resolved[spec.name] = current
    for spec in SPECS:
        item = resolved[spec.name]
        problem = spec.check(item.value) if spec.check else None
        if problem:
            raise ConfigError(f"{item.where(spec.name)}: {problem}")
    _cross_checks(resolved)
    return resolved


def _convert(spec: Spec, raw: Any, source: str) -> _Resolved:
    try:
        value = spec.convert(raw)
    except ValueError as exc:
        shown = "***" if spec.secret else raw
        raise ConfigError(f"{_Resolved(None, source, shown).where(spec.name)}: {exc}") from None
    return _Resolved(value, source, "***" if spec.secret else raw)


def _cross_checks(resolved: dict[str, _Resolved]) -> None:
    def less(short: str, long: str) -> None:
        a, b = resolved[short], resolved[long]
        if a.value >= b.value:
            raise ConfigError(
                f"{a.where(short)} must be shorter than {b.where(long)}:"
                f" {a.value:g} ≥ {b.value:g} would let the lease lapse between renewals"
            )

    less("heartbeat_s", "partition_lease_s")
    less("heartbeat_s", "worker_live_s")
    less("long_heartbeat_s", "long_lease_s")


def load_settings(
    env: Mapping[str, str] | None = None, file: str | os.PathLike[str] | None = None
) -> Settings:
    """The effective settings, validated; raises ConfigError on the first bad value."""
    resolved = _resolve(env, file)
    return Settings(**{name: item.value for name, item in resolved.items()})


def explain(
    env: Mapping[str, str] | None = None, file: str | os.PathLike[str] | None = None
) -> list[tuple[str, Any, str]]:
    """`(name, value, source)` per setting; source is `default`, `file:<path>` or
    `env:<VAR>`. Secret values (API keys, URLs with passwords) come back masked."""
    return [
        (name, mask(name, item.value), item.source) for name, item in _resolve(env, file).items()
    ]


def mask(name: str, value: Any) -> Any:
    """A value fit for printing: API keys as a count, passwords in URLs as ***."""
    spec = BY_NAME.get(name)
    if spec is None or not spec.secret or value is None:
        return value
    if isinstance(value, tuple):
        return f"<{len(value)} key{'s' if len(value) != 1 else ''}>"
    if isinstance(value, str):
        parts = urlsplit(value)
        if parts.password:
            netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
            return urlunsplit(parts._replace(netloc=netloc))
    return value


def describe() -> list[tuple[str, tuple[str, ...], Any, str]]:
    """`(name, env vars, default, meaning)` per setting (used by the docs test)."""
    defaults = Settings()
    return [(s.name, s.env, getattr(defaults, s.name), s.doc) for s in SPECS]
