"""Tuning numbers, with the reference engine's values as their defaults.

Each field says how it is read and checked and what it means (`metadata=setting(…)`,
`jobledger.config.spec`): the one list of settings. `jobledger.config.load` loads them
from the environment and a config file and validates them; the engine itself only
reads this dataclass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from jobledger.config.checks import (
    at_least,
    check_bootstrap,
    check_code_attempts,
    check_code_topics,
    check_delays,
    check_keys,
    check_networks,
    check_target_topics,
    check_timezone,
    one_of,
    opt_positive,
    port_number,
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
    as_opt_bool,
    as_opt_days,
    as_opt_str,
    as_str,
    as_texts,
)
from jobledger.config.spec import setting


@dataclass(frozen=True, slots=True)
class Settings:
    partitions: int = field(
        default=64,
        metadata=setting(as_int, at_least(1), "Fast-lane partitions (lease rows); md5(key) mod N."),
    )
    fast_batch: int = field(
        default=100,
        metadata=setting(as_int, at_least(1), "Rows read per fast-lane partition read."),
    )
    long_batch: int = field(
        default=10, metadata=setting(as_int, at_least(1), "Rows reserved per long-lane batch.")
    )
    retry_delays_minutes: tuple[float, ...] = field(
        default=(1, 2, 4, 8, 16),
        metadata=setting(
            as_delays,
            check_delays,
            "Wait after the 1st, 2nd, … answered failure; the last repeats.",
        ),
    )
    max_attempts: int = field(
        default=6,
        metadata=setting(as_int, at_least(1), "Runs before DEAD (6 = first + 5 retries)."),
    )
    max_attempts_by_code: dict[str, int] = field(
        default_factory=dict,
        metadata=setting(
            as_code_attempts, check_code_attempts, "Per job code max attempts: code=attempts,…"
        ),
    )
    partition_lease_s: float = field(
        default=30.0, metadata=setting(as_float, positive, "Partition lease length (s).")
    )
    heartbeat_s: float = field(
        default=10.0,
        metadata=setting(as_float, positive, "Partition lease and liveness heartbeat (s)."),
    )
    worker_live_s: float = field(
        default=30.0,
        metadata=setting(as_float, positive, "A pod is live while its heartbeat is newer (s)."),
    )
    long_lease_s: float = field(
        default=300.0, metadata=setting(as_float, positive, "Long-lane row lease (s).")
    )
    long_heartbeat_s: float = field(
        default=60.0, metadata=setting(as_float, positive, "Long-lane lease renewal interval (s).")
    )
    probe_interval_s: float = field(
        default=30.0,
        metadata=setting(as_float, positive, "One probe run through a paused target every (s)."),
    )
    # jittered; only covers lost notifications
    safety_poll_s: float = field(
        default=15.0,
        metadata=setting(as_float, positive, "Jittered poll that covers lost wake-ups (s)."),
    )
    schedule_tick_s: float = field(
        default=15.0, metadata=setting(as_float, positive, "Schedule tick interval (s).")
    )
    schedule_grace_s: float = field(
        default=60.0,
        metadata=setting(as_float, at_least(0), "A slot starting later than this is late (s)."),
    )
    default_timezone: str = field(
        default="UTC",
        metadata=setting(as_str, check_timezone, "Time zone crons are read in (IANA name)."),
    )
    # JOBS_WORKERS=off → this pod only enqueues
    workers: bool = field(
        default=True,
        metadata=setting(
            as_bool,
            None,
            "off: this pod only enqueues (no lanes, tick, lossy consumer).",
            aliases=("JOBS_WORKERS",),
        ),
    )
    # a started runtime keeps the collector off its boot objects (D11, D29)
    gc_freeze: bool | None = field(
        default=None,
        metadata=setting(
            as_opt_bool,
            None,
            "on: a started worker moves the objects it booted with out of the garbage"
            " collector's scans (gc.freeze) and raises the youngest generation's threshold"
            " (700 -> 10,000) until it stops. auto (unset): on in `jobledger worker` and"
            " `jobledger serve`, off where an App or Runtime runs inside another program.",
        ),
    )
    # SIGTERM → the pod has left (or exits anyway) within this
    stop_timeout_s: float = field(
        default=10.0,
        metadata=setting(
            as_float,
            positive,
            "A stopping pod finishes in-flight runs, releases its partitions and exits within"
            " this, whatever waits (s); long-lane at-least-once runs still going at 70 % of"
            " it are given back, due now. `jobledger worker --stop-timeout-s` overrides it.",
        ),
    )
    max_payload_bytes: int = field(
        default=1_048_576,
        metadata=setting(as_int, at_least(1), "Largest JSON payload accepted at enqueue."),
    )
    dead_retention_days: float = field(
        default=30.0, metadata=setting(as_float, positive, "DEAD rows expire after (days).")
    )
    # None: keep the log forever
    log_retention_days: float | None = field(
        default=None,
        metadata=setting(
            as_opt_days,
            opt_positive,
            "Closed job streams archived out of the log after (days); unset = forever.",
        ),
    )
    kafka_enabled: bool = field(
        default=True,
        metadata=setting(as_bool, None, "off: Kafka targets are paused, nothing is sent."),
    )
    kafka_target_topics: str = field(
        default="",
        metadata=setting(
            as_str,
            check_target_topics,
            "Extra kafka:<topic> targets: topic[:at_least_once],…",
            aliases=("KAFKA_TARGET_TOPICS",),
        ),
    )
    kafka_bootstrap: str | None = field(
        default=None,
        metadata=setting(as_opt_str, check_bootstrap, "Kafka bootstrap servers host:port,…"),
    )
    pause_alert_s: float = field(
        default=300.0,
        metadata=setting(as_float, positive, "Alert when a target stays paused longer (s)."),
    )
    # lossy targets go through a Redis stream when set
    lossy_redis_url: str | None = field(
        default=None,
        metadata=setting(
            as_opt_str,
            url_check(("redis", "rediss", "unix")),
            "Redis for lossy targets; in-process queue when unset.",
            aliases=("QUEUE_REDIS_URL",),
            secret=True,
        ),
    )
    # in-process lossy queue bound; Redis stream MAXLEN (approx.)
    lossy_queue_size: int = field(
        default=10_000,
        metadata=setting(
            as_int, at_least(1), "In-process lossy queue bound; approximate Redis stream MAXLEN."
        ),
    )
    # job code → topic
    kafka_topic_overrides: dict[str, str] = field(
        default_factory=dict,
        metadata=setting(
            as_code_topics,
            check_code_topics,
            "Topic per job code, overriding the target's topic: code=topic,…",
        ),
    )
    kafka_connect_timeout_s: float = field(
        default=3.0, metadata=setting(as_float, positive, "Kafka connect timeout (s).")
    )
    kafka_request_timeout_s: float = field(
        default=10.0, metadata=setting(as_float, positive, "Kafka request timeout (s).")
    )
    # total runs per slot when a schedule declares none
    schedule_default_retry: int = field(
        default=3,
        metadata=setting(
            as_int, at_least(1), "Total runs per slot when a schedule declares no retry_count."
        ),
    )
    # interval ≤ this → missed-slot policy skip
    schedule_skip_max_interval_s: float = field(
        default=300.0,
        metadata=setting(
            as_float,
            at_least(0),
            "Schedules this frequent or more default to missed-slot policy skip (s).",
        ),
    )
    # admin API keys (secrets: never printed)
    api_keys: tuple[str, ...] = field(
        default=(),
        metadata=setting(
            as_keys,
            check_keys,
            "Admin API keys key[:role[:id]],… (secret; see docs/admin.md).",
            secret=True,
        ),
    )
    # None: JOBLEDGER_STORE or sqlite:///jobledger.db
    store_url: str | None = field(
        default=None,
        metadata=setting(
            as_opt_str,
            url_check(("memory", "sqlite", "postgres", "postgresql", "mongodb", "mongodb+srv")),
            "Store URL (sqlite:///file.db, postgresql://…, mongodb://…, memory://).",
            aliases=("JOBLEDGER_STORE",),
            secret=True,
        ),
    )
    # None: the store URL's schema (?schema= / options=-csearch_path=), else jobledger
    postgres_schema: str | None = field(
        default=None,
        metadata=setting(
            as_opt_str,
            None,
            "PostgreSQL schema of the engine's tables when the store URL names none"
            " (default jobledger).",
        ),
    )
    # None: the store URL's dead_ttl_seconds=, else no TTL (DEAD rows expire through events)
    mongodb_dead_ttl_seconds: int | None = field(
        default=None,
        metadata=setting(
            lambda v: None if as_opt_str(str(v)) is None else as_int(v),
            opt_positive,
            "MongoDB: server-side TTL on DEAD rows (s), without a JobExpired event;"
            " unset = none (docs/mongodb.md).",
        ),
    )
    # text | json
    log_format: str = field(
        default="text",
        metadata=setting(
            lambda v: as_str(v).lower(), one_of("text", "json"), "Log lines: text or json."
        ),
    )
    log_level: str = field(
        default="INFO",
        metadata=setting(
            lambda v: as_str(v).upper(),
            one_of("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
            "Root log level.",
        ),
    )
    # where the log archive writes JSON Lines
    log_archive_dir: str = field(
        default="jobledger-archive",
        metadata=setting(as_str, None, "Directory the log archive writes JSON Lines to."),
    )
    # a worker's /metrics, /healthz, /readyz (observability/metrics_server.py)
    metrics_port: int = field(
        default=0,
        metadata=setting(
            as_int,
            port_number,
            "Port of a worker's /metrics, /healthz and /readyz; 0 = not served.",
        ),
    )
    metrics_host: str = field(
        default="127.0.0.1",
        metadata=setting(
            as_str,
            None,
            "Address the worker's metrics server listens on (loopback unless set).",
        ),
    )
    # the event-loop watchdog (observability/loop_lag.py)
    loop_block_warn_s: float = field(
        default=0.5,
        metadata=setting(
            as_float,
            at_least(0),
            "A handler that holds the event loop longer than this is reported, once per"
            " target (s); 0 = no watchdog.",
        ),
    )
    # proxies whose X-Forwarded-For / X-Forwarded-Proto the admin server believes
    forwarded_allow_ips: tuple[str, ...] = field(
        default=(),
        metadata=setting(
            as_texts,
            check_networks,
            "Proxies (addresses or networks) whose X-Forwarded-For the admin server"
            " trusts; none by default.",
        ),
    )
