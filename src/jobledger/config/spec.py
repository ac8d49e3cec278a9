"""The table of settings: for each `Settings` field, how its value is read and checked,
what it means, and the environment variables that set it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jobledger.config.checks import (
    at_least,
    check_bootstrap,
    check_code_attempts,
    check_code_topics,
    check_delays,
    check_keys,
    check_target_topics,
    check_timezone,
    one_of,
    opt_positive,
    positive,
    url_check,
)
from jobledger.config.convert import (
    as_bool,
    as_code_attempts,
    as_code_topics,
    as_delays,
    as_float,
    as_int,
    as_keys,
    as_opt_days,
    as_opt_str,
    as_str,
)
from jobledger.config.settings import Settings


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
    Spec("partitions", as_int, at_least(1), "Fast-lane partitions (lease rows); md5(key) mod N."),
    Spec("fast_batch", as_int, at_least(1), "Rows read per fast-lane partition read."),
    Spec("long_batch", as_int, at_least(1), "Rows reserved per long-lane batch."),
    Spec(
        "retry_delays_minutes",
        as_delays,
        check_delays,
        "Wait after the 1st, 2nd, … answered failure; the last repeats.",
    ),
    Spec("max_attempts", as_int, at_least(1), "Runs before DEAD (6 = first + 5 retries)."),
    Spec(
        "max_attempts_by_code",
        as_code_attempts,
        check_code_attempts,
        "Per job code max attempts: code=attempts,…",
    ),
    Spec("partition_lease_s", as_float, positive, "Partition lease length (s)."),
    Spec("heartbeat_s", as_float, positive, "Partition lease and liveness heartbeat (s)."),
    Spec("worker_live_s", as_float, positive, "A pod is live while its heartbeat is newer (s)."),
    Spec("long_lease_s", as_float, positive, "Long-lane row lease (s)."),
    Spec("long_heartbeat_s", as_float, positive, "Long-lane lease renewal interval (s)."),
    Spec(
        "probe_interval_s", as_float, positive, "One probe run through a paused target every (s)."
    ),
    Spec("safety_poll_s", as_float, positive, "Jittered poll that covers lost wake-ups (s)."),
    Spec("schedule_tick_s", as_float, positive, "Schedule tick interval (s)."),
    Spec("schedule_grace_s", as_float, at_least(0), "A slot starting later than this is late (s)."),
    Spec("default_timezone", as_str, check_timezone, "Time zone crons are read in (IANA name)."),
    Spec(
        "workers",
        as_bool,
        None,
        "off: this pod only enqueues (no lanes, tick, lossy consumer).",
        aliases=("JOBS_WORKERS",),
    ),
    Spec(
        "gc_freeze",
        as_bool,
        None,
        "on: a started worker moves the objects it booted with out of the garbage"
        " collector's scans (gc.freeze) until it stops.",
    ),
    Spec(
        "stop_timeout_s",
        as_float,
        positive,
        "A stopping pod finishes in-flight runs, releases its partitions and exits within"
        " this, whatever waits (s).",
    ),
    Spec("max_payload_bytes", as_int, at_least(1), "Largest JSON payload accepted at enqueue."),
    Spec("dead_retention_days", as_float, positive, "DEAD rows expire after (days)."),
    Spec(
        "log_retention_days",
        as_opt_days,
        opt_positive,
        "Closed job streams archived out of the log after (days); unset = forever.",
    ),
    Spec("kafka_enabled", as_bool, None, "off: Kafka targets are paused, nothing is sent."),
    Spec(
        "kafka_target_topics",
        as_str,
        check_target_topics,
        "Extra kafka:<topic> targets: topic[:at_least_once],…",
        aliases=("KAFKA_TARGET_TOPICS",),
    ),
    Spec("kafka_bootstrap", as_opt_str, check_bootstrap, "Kafka bootstrap servers host:port,…"),
    Spec("pause_alert_s", as_float, positive, "Alert when a target stays paused longer (s)."),
    Spec(
        "lossy_redis_url",
        as_opt_str,
        url_check(("redis", "rediss", "unix")),
        "Redis for lossy targets; in-process queue when unset.",
        aliases=("QUEUE_REDIS_URL",),
        secret=True,
    ),
    Spec(
        "lossy_queue_size",
        as_int,
        at_least(1),
        "In-process lossy queue bound; approximate Redis stream MAXLEN.",
    ),
    Spec(
        "kafka_topic_overrides",
        as_code_topics,
        check_code_topics,
        "Topic per job code, overriding the target's topic: code=topic,…",
    ),
    Spec("kafka_connect_timeout_s", as_float, positive, "Kafka connect timeout (s)."),
    Spec("kafka_request_timeout_s", as_float, positive, "Kafka request timeout (s)."),
    Spec(
        "schedule_default_retry",
        as_int,
        at_least(1),
        "Total runs per slot when a schedule declares no retry_count.",
    ),
    Spec(
        "schedule_skip_max_interval_s",
        as_float,
        at_least(0),
        "Schedules this frequent or more default to missed-slot policy skip (s).",
    ),
    Spec(
        "api_keys",
        as_keys,
        check_keys,
        "Admin API keys key[:role[:id]],… (secret; see docs/admin.md).",
        secret=True,
    ),
    Spec(
        "store_url",
        as_opt_str,
        url_check(("memory", "sqlite", "postgres", "postgresql", "mongodb", "mongodb+srv")),
        "Store URL (sqlite:///file.db, postgresql://…, mongodb://…, memory://).",
        aliases=("JOBLEDGER_STORE",),
        secret=True,
    ),
    Spec(
        "log_format",
        lambda v: as_str(v).lower(),
        one_of("text", "json"),
        "Log lines: text or json.",
    ),
    Spec(
        "log_level",
        lambda v: as_str(v).upper(),
        one_of("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
        "Root log level.",
    ),
    Spec("log_archive_dir", as_str, None, "Directory the log archive writes JSON Lines to."),
)
BY_NAME = {spec.name: spec for spec in SPECS}
FIELDS = {f.name for f in dataclasses.fields(Settings)}
if set(BY_NAME) != FIELDS:  # a field added to Settings needs a Spec here (and docs)
    raise RuntimeError(f"config.SPECS out of step with Settings: {sorted(FIELDS ^ set(BY_NAME))}")
