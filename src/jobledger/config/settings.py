"""Tuning numbers with the reference's values as defaults (reference §8).

`jobledger.config.load` loads them from the environment and a config file and validates
them; the engine itself only reads this dataclass.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Settings:
    partitions: int = 64
    fast_batch: int = 100
    long_batch: int = 10
    retry_delays_minutes: tuple[float, ...] = (1, 2, 4, 8, 16)
    max_attempts: int = 6
    max_attempts_by_code: dict[str, int] = field(default_factory=dict)
    partition_lease_s: float = 30.0
    heartbeat_s: float = 10.0
    worker_live_s: float = 30.0
    long_lease_s: float = 300.0
    long_heartbeat_s: float = 60.0
    probe_interval_s: float = 30.0
    safety_poll_s: float = 15.0  # jittered; only covers lost notifications
    schedule_tick_s: float = 15.0
    schedule_grace_s: float = 60.0
    default_timezone: str = "UTC"
    workers: bool = True  # JOBS_WORKERS=off → this pod only enqueues
    gc_freeze: bool = True  # a started runtime keeps the collector off its boot objects
    stop_timeout_s: float = 10.0  # SIGTERM → the pod has left (or exits anyway) within this
    max_payload_bytes: int = 1_048_576
    dead_retention_days: float = 30.0
    log_retention_days: float | None = None  # None: keep the log forever
    kafka_enabled: bool = True
    kafka_target_topics: str = ""
    kafka_bootstrap: str | None = None
    pause_alert_s: float = 300.0
    # --- added with jobledger.config.load (issue 11 / issue 9) ---
    lossy_redis_url: str | None = None  # lossy targets go through a Redis stream when set
    lossy_queue_size: int = 10_000  # in-process lossy queue bound; Redis stream MAXLEN (approx.)
    kafka_topic_overrides: dict[str, str] = field(default_factory=dict)  # job code → topic
    kafka_connect_timeout_s: float = 3.0
    kafka_request_timeout_s: float = 10.0
    schedule_default_retry: int = 3  # total runs per slot when a schedule declares none
    schedule_skip_max_interval_s: float = 300.0  # interval ≤ this → missed-slot policy skip
    api_keys: tuple[str, ...] = ()  # admin API keys (secrets: never printed)
    store_url: str | None = None  # None: JOBLEDGER_STORE or sqlite:///jobledger.db
    log_format: str = "text"  # text | json
    log_level: str = "INFO"
    log_archive_dir: str = "jobledger-archive"  # where the log archive writes JSON Lines
