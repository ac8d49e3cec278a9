"""Checks on converted setting values: each returns a problem (a sentence) or None.

`parse_kafka_target_topics` is here too: the `kafka_target_topics` check and the Kafka
target (`jobledger.targets.kafka.rules`) share its grammar.
"""

from __future__ import annotations

import ipaddress
import re
import zoneinfo
from collections.abc import Callable
from typing import Any

from jobledger.config.api_keys import parse_api_keys
from jobledger.config.convert import split_list
from jobledger.domain.errors import ConfigError
from jobledger.domain.jobs import DeliveryMode


def at_least(low: float) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return f"must be at least {low:g}, got {value:g}" if value < low else None

    return check


def positive(value: Any) -> str | None:
    return f"must be greater than 0, got {value:g}" if value <= 0 else None


def opt_positive(value: Any) -> str | None:
    return None if value is None else positive(value)


def check_delays(value: tuple[float, ...]) -> str | None:
    if not value:
        return "needs at least one delay"
    negative = [d for d in value if d < 0]
    return f"a retry delay must not be negative, got {negative[0]:g}" if negative else None


def check_code_attempts(value: dict[str, int]) -> str | None:
    for code, attempts in value.items():
        if not code:
            return "a job code must not be empty"
        if attempts < 1:
            return f"max attempts for {code!r} must be at least 1, got {attempts}"
    return None


_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def check_code_topics(value: dict[str, str]) -> str | None:
    for code, topic in value.items():
        if not code or not _TOPIC.fullmatch(topic):
            return f"{code!r}={topic!r} is not a job code and a Kafka topic name"
    return None


def parse_kafka_target_topics(text: str) -> list[tuple[str, DeliveryMode]]:
    """`topic[:at_least_once|:at_most_once],…` (the KAFKA_TARGET_TOPICS setting)."""
    result: list[tuple[str, DeliveryMode]] = []
    for part in split_list(text):
        topic, sep, mode = part.partition(":")
        topic = topic.strip()
        if not _TOPIC.fullmatch(topic):
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


def check_target_topics(value: str) -> str | None:
    try:
        parse_kafka_target_topics(value)
    except ValueError as exc:
        return str(exc)
    return None


def check_bootstrap(value: str | None) -> str | None:
    for server in split_list(value or ""):
        host, sep, port = server.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            return f"{server!r} is not host:port"
    return None


def url_check(schemes: tuple[str, ...]) -> Callable[[Any], str | None]:
    def check(value: str | None) -> str | None:
        if value is None:
            return None
        scheme = value.split(":", 1)[0].lower() if ":" in value else ""
        if scheme not in schemes:
            return f"expected a {' / '.join(s + '://' for s in schemes)} URL, got scheme {scheme!r}"
        return None

    return check


def check_timezone(value: str) -> str | None:
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return f"unknown time zone {value!r} (use an IANA name such as UTC or Asia/Bangkok)"
    return None


def one_of(*choices: str) -> Callable[[Any], str | None]:
    def check(value: str) -> str | None:
        return None if value in choices else f"must be one of {', '.join(choices)}, got {value!r}"

    return check


def check_keys(value: tuple[str, ...]) -> str | None:
    """`parse_api_keys` (`key[:role[:id]]`) decides; the HTTP layer serves the same mapping."""
    bad = [k for k in value if not k or any(c.isspace() for c in k)]
    if bad:
        return "an API key must be non-empty and contain no spaces"
    try:
        parse_api_keys(value)
    except ConfigError as exc:
        return exc.message
    return None


def port_number(value: int) -> str | None:
    return None if 0 <= value <= 65535 else f"must be a port number (0-65535), got {value}"


def check_networks(value: tuple[str, ...]) -> str | None:
    """Addresses or networks (`10.0.0.0/8`, `::1`), or `*` alone for any address."""
    if "*" in value:
        return None if value == ("*",) else "`*` (any address) must stand alone"
    for item in value:
        try:
            ipaddress.ip_network(item)
        except ValueError:
            return f"{item!r} is not an IP address or network"
    return None
