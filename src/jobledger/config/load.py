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

import dataclasses
import difflib
import math
import os
import re
import tomllib
import zoneinfo
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from jobledger.config.api_keys import parse_api_keys
from jobledger.config.settings import Settings
from jobledger.domain.errors import ConfigError
from jobledger.domain.jobs import DeliveryMode

CONFIG_ENV = "JOBLEDGER_CONFIG"
DEFAULT = "default"

# --- converters: text (env) or a TOML value → a Python value; ValueError explains ------


def _int(value: Any) -> int:
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


def _float(value: Any) -> float:
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


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(f"expected on/off (or true/false, 1/0, yes/no), got {value!r}")


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value.strip()


def _opt_str(value: Any) -> str | None:
    text = _str(value)
    return text or None


_FOREVER = {"", "none", "forever", "never"}


def _opt_days(value: Any) -> float | None:
    if isinstance(value, str) and value.strip().lower() in _FOREVER:
        return None
    return _float(value)


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _delays(value: Any) -> tuple[float, ...]:
    items = _split(value) if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ValueError(f"expected a list of minutes such as 1,2,4,8,16, got {value!r}")
    return tuple(_float(item) for item in items)


def _pairs(value: Any, what: str) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return {str(k).strip(): v for k, v in value.items()}
    if not isinstance(value, str):
        raise ValueError(f"expected {what}, got {value!r}")
    result: dict[str, Any] = {}
    for part in _split(value):
        name, sep, item = part.partition("=")
        if not sep or not name.strip() or not item.strip():
            raise ValueError(f"expected {what}, got {part!r}")
        result[name.strip()] = item.strip()
    return result


def _code_attempts(value: Any) -> dict[str, int]:
    return {
        code: _int(v) for code, v in _pairs(value, "code=attempts pairs such as a=3,b=5").items()
    }


def _code_topics(value: Any) -> dict[str, str]:
    return {code: _str(v) for code, v in _pairs(value, "code=topic pairs such as a=t.one").items()}


def _keys(value: Any) -> tuple[str, ...]:
    items = _split(value) if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ValueError("expected a list of API keys")
    return tuple(_str(item) for item in items)


# --- checks on converted values: return a problem or None --------------------------------


def _at_least(low: float) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return f"must be at least {low:g}, got {value:g}" if value < low else None

    return check


def _positive(value: Any) -> str | None:
    return f"must be greater than 0, got {value:g}" if value <= 0 else None


def _opt_positive(value: Any) -> str | None:
    return None if value is None else _positive(value)


def _check_delays(value: tuple[float, ...]) -> str | None:
    if not value:
        return "needs at least one delay"
    negative = [d for d in value if d < 0]
    return f"a retry delay must not be negative, got {negative[0]:g}" if negative else None


def _check_code_attempts(value: dict[str, int]) -> str | None:
    for code, attempts in value.items():
        if not code:
            return "a job code must not be empty"
        if attempts < 1:
            return f"max attempts for {code!r} must be at least 1, got {attempts}"
    return None


_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def _check_code_topics(value: dict[str, str]) -> str | None:
    for code, topic in value.items():
        if not code or not _TOPIC.match(topic):
            return f"{code!r}={topic!r} is not a job code and a Kafka topic name"
    return None


def parse_kafka_target_topics(text: str) -> list[tuple[str, DeliveryMode]]:
    """`topic[:at_least_once|:at_most_once],…` (reference §8 KAFKA_TARGET_TOPICS)."""
    result: list[tuple[str, DeliveryMode]] = []
    for part in _split(text):
        topic, sep, mode = part.partition(":")
        topic = topic.strip()
        if not _TOPIC.match(topic):
            raise ValueError(f"{topic!r} is not a Kafka topic name ([A-Za-z0-9._-], 1-249 chars)")
        try:
            delivery = DeliveryMode(mode.strip()) if sep else DeliveryMode.AT_MOST_ONCE
        except ValueError:
            modes = ", ".join(m.value for m in DeliveryMode)
            raise ValueError(
                f"unknown delivery mode {mode.strip()!r} for topic {topic!r} (one of {modes})"
            ) from None
        result.append((topic, delivery))
    return result


def _check_target_topics(value: str) -> str | None:
    try:
        parse_kafka_target_topics(value)
    except ValueError as exc:
        return str(exc)
    return None


def _check_bootstrap(value: str | None) -> str | None:
    for server in _split(value or ""):
        host, sep, port = server.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            return f"{server!r} is not host:port"
    return None


def _url_check(schemes: tuple[str, ...]) -> Callable[[Any], str | None]:
    def check(value: str | None) -> str | None:
        if value is None:
            return None
        scheme = value.split(":", 1)[0].lower() if ":" in value else ""
        if scheme not in schemes:
            return f"expected a {' / '.join(s + '://' for s in schemes)} URL, got scheme {scheme!r}"
        return None

    return check


def _check_timezone(value: str) -> str | None:
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return f"unknown time zone {value!r} (use an IANA name such as UTC or Asia/Bangkok)"
    return None


def _one_of(*choices: str) -> Callable[[Any], str | None]:
    def check(value: str) -> str | None:
        return None if value in choices else f"must be one of {', '.join(choices)}, got {value!r}"

    return check


def _check_keys(value: tuple[str, ...]) -> str | None:
    """`parse_api_keys` (`key[:role[:id]]`) decides; the HTTP layer serves the same mapping."""
    bad = [k for k in value if not k or any(c.isspace() for c in k)]
    if bad:
        return "an API key must be non-empty and contain no spaces"
    try:
        parse_api_keys(value)
    except ConfigError as exc:
        return exc.message
    return None


# --- the table of settings --------------------------------------------------------------


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


SPECS: tuple[Spec, ...] = (
    Spec("partitions", _int, _at_least(1), "Fast-lane partitions (lease rows); md5(key) mod N."),
    Spec("fast_batch", _int, _at_least(1), "Rows read per fast-lane partition read."),
    Spec("long_batch", _int, _at_least(1), "Rows reserved per long-lane batch."),
    Spec(
        "retry_delays_minutes",
        _delays,
        _check_delays,
        "Wait after the 1st, 2nd, … answered failure; the last repeats.",
    ),
    Spec("max_attempts", _int, _at_least(1), "Runs before DEAD (6 = first + 5 retries)."),
    Spec(
        "max_attempts_by_code",
        _code_attempts,
        _check_code_attempts,
        "Per job code max attempts: code=attempts,…",
    ),
    Spec("partition_lease_s", _float, _positive, "Partition lease length (s)."),
    Spec("heartbeat_s", _float, _positive, "Partition lease and liveness heartbeat (s)."),
    Spec("worker_live_s", _float, _positive, "A pod is live while its heartbeat is newer (s)."),
    Spec("long_lease_s", _float, _positive, "Long-lane row lease (s)."),
    Spec("long_heartbeat_s", _float, _positive, "Long-lane lease renewal interval (s)."),
    Spec("probe_interval_s", _float, _positive, "One probe run through a paused target every (s)."),
    Spec("safety_poll_s", _float, _positive, "Jittered poll that covers lost wake-ups (s)."),
    Spec("schedule_tick_s", _float, _positive, "Schedule tick interval (s)."),
    Spec("schedule_grace_s", _float, _at_least(0), "A slot starting later than this is late (s)."),
    Spec("default_timezone", _str, _check_timezone, "Time zone crons are read in (IANA name)."),
    Spec(
        "workers",
        _bool,
        None,
        "off: this pod only enqueues (no lanes, tick, lossy consumer).",
        aliases=("JOBS_WORKERS",),
    ),
    Spec(
        "gc_freeze",
        _bool,
        None,
        "on: a started worker moves the objects it booted with out of the garbage"
        " collector's scans (gc.freeze) until it stops.",
    ),
    Spec(
        "stop_timeout_s",
        _float,
        _positive,
        "A stopping pod finishes in-flight runs, releases its partitions and exits within"
        " this, whatever waits (s).",
    ),
    Spec("max_payload_bytes", _int, _at_least(1), "Largest JSON payload accepted at enqueue."),
    Spec("dead_retention_days", _float, _positive, "DEAD rows expire after (days)."),
    Spec(
        "log_retention_days",
        _opt_days,
        _opt_positive,
        "Closed job streams archived out of the log after (days); unset = forever.",
    ),
    Spec("kafka_enabled", _bool, None, "off: Kafka targets are paused, nothing is sent."),
    Spec(
        "kafka_target_topics",
        _str,
        _check_target_topics,
        "Extra kafka:<topic> targets: topic[:at_least_once],…",
        aliases=("KAFKA_TARGET_TOPICS",),
    ),
    Spec("kafka_bootstrap", _opt_str, _check_bootstrap, "Kafka bootstrap servers host:port,…"),
    Spec("pause_alert_s", _float, _positive, "Alert when a target stays paused longer (s)."),
    Spec(
        "lossy_redis_url",
        _opt_str,
        _url_check(("redis", "rediss", "unix")),
        "Redis for lossy targets; in-process queue when unset.",
        aliases=("QUEUE_REDIS_URL",),
        secret=True,
    ),
    Spec(
        "lossy_queue_size",
        _int,
        _at_least(1),
        "In-process lossy queue bound; approximate Redis stream MAXLEN.",
    ),
    Spec(
        "kafka_topic_overrides",
        _code_topics,
        _check_code_topics,
        "Topic per job code, overriding the target's topic: code=topic,…",
    ),
    Spec("kafka_connect_timeout_s", _float, _positive, "Kafka connect timeout (s)."),
    Spec("kafka_request_timeout_s", _float, _positive, "Kafka request timeout (s)."),
    Spec(
        "schedule_default_retry",
        _int,
        _at_least(1),
        "Total runs per slot when a schedule declares no retry_count.",
    ),
    Spec(
        "schedule_skip_max_interval_s",
        _float,
        _at_least(0),
        "Schedules this frequent or more default to missed-slot policy skip (s).",
    ),
    Spec(
        "api_keys",
        _keys,
        _check_keys,
        "Admin API keys key[:role[:id]],… (secret; see docs/admin.md).",
        secret=True,
    ),
    Spec(
        "store_url",
        _opt_str,
        _url_check(("memory", "sqlite", "postgres", "postgresql", "mongodb", "mongodb+srv")),
        "Store URL (sqlite:///file.db, postgresql://…, mongodb://…, memory://).",
        aliases=("JOBLEDGER_STORE",),
        secret=True,
    ),
    Spec(
        "log_format", lambda v: _str(v).lower(), _one_of("text", "json"), "Log lines: text or json."
    ),
    Spec(
        "log_level",
        lambda v: _str(v).upper(),
        _one_of("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
        "Root log level.",
    ),
    Spec("log_archive_dir", _str, None, "Directory the log archive writes JSON Lines to."),
)
_BY_NAME = {spec.name: spec for spec in SPECS}
_FIELDS = {f.name for f in dataclasses.fields(Settings)}
if set(_BY_NAME) != _FIELDS:  # a field added to Settings needs a Spec here (and docs)
    raise RuntimeError(f"config.SPECS out of step with Settings: {sorted(_FIELDS ^ set(_BY_NAME))}")


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
    unknown = sorted(set(section) - _FIELDS)
    if unknown:
        hints = difflib.get_close_matches(unknown[0], sorted(_FIELDS), n=1)
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
    spec = _BY_NAME.get(name)
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


def env_names(name: str) -> tuple[str, ...]:
    """The environment variables that set `name`, in precedence order."""
    return _BY_NAME[name].env


def describe() -> list[tuple[str, tuple[str, ...], Any, str]]:
    """`(name, env vars, default, meaning)` per setting (used by the docs test)."""
    defaults = Settings()
    return [(s.name, s.env, getattr(defaults, s.name), s.doc) for s in SPECS]
