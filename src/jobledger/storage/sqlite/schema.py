"""The SQLite schema as versioned migrations (docs/storage.md explains every index).

A migration is frozen once released: change the schema by appending a new version,
never by editing an old one. `migrate()` applies the missing ones in one write
transaction, so several processes opening a new file at once apply each exactly once.
"""

from __future__ import annotations

import sqlite3

MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (
        1,
        (
            # --- the log --------------------------------------------------------------
            # position: AUTOINCREMENT never reuses a number, and SQLite has one writer at a
            # time, so positions are handed out in commit order.
            """
            CREATE TABLE events (
                position   INTEGER PRIMARY KEY AUTOINCREMENT,
                stream     TEXT    NOT NULL,
                version    INTEGER NOT NULL,
                type       TEXT    NOT NULL,
                data       TEXT    NOT NULL,
                at         TEXT    NOT NULL,
                actor      TEXT,
                trace_id   TEXT,
                prev_hash  TEXT    NOT NULL,
                hash       TEXT    NOT NULL,
                dedupe_key TEXT,
                UNIQUE (stream, version)
            )
            """,
            # the dedupe window is the log's retention
            "CREATE UNIQUE INDEX events_dedupe_key ON events (dedupe_key)"
            " WHERE dedupe_key IS NOT NULL",
            # --- the queue: open jobs only (inline projection) -----------------------------
            """
            CREATE TABLE jobs (
                id             TEXT    PRIMARY KEY,
                code           TEXT    NOT NULL,
                target         TEXT    NOT NULL,
                lane           TEXT    NOT NULL,
                "key"          TEXT,
                "partition"    INTEGER NOT NULL,
                version        INTEGER NOT NULL,
                payload        TEXT,
                dedupe_key     TEXT    NOT NULL,
                status         TEXT    NOT NULL,
                attempts       INTEGER NOT NULL,
                next_run_at    TEXT    NOT NULL,
                created_at     TEXT    NOT NULL,
                updated_at     TEXT    NOT NULL,
                stream_version INTEGER NOT NULL,
                last_hash      TEXT    NOT NULL,
                headers        TEXT,
                trace_id       TEXT,
                traceparent    TEXT,
                actor          TEXT,
                last_error     TEXT,
                dead_reason    TEXT,
                claimed_by     TEXT,
                claim_token    TEXT,
                lease_until    TEXT,
                inflight_token TEXT,
                running_code   TEXT,
                closed_at      TEXT,
                order_key      TEXT    NOT NULL
            )
            """,
            'CREATE INDEX jobs_fast_pending ON jobs ("partition", order_key, version, id)'
            " WHERE status = 'PENDING' AND lane = 'fast'",
            'CREATE INDEX jobs_fast_due ON jobs ("partition", next_run_at)'
            " WHERE status = 'PENDING' AND lane = 'fast'",
            "CREATE INDEX jobs_long_pending ON jobs (next_run_at, id)"
            " WHERE status = 'PENDING' AND lane = 'long'",
            "CREATE INDEX jobs_running_lease ON jobs (lease_until) WHERE status = 'RUNNING'",
            "CREATE UNIQUE INDEX jobs_running_code ON jobs (running_code)"
            " WHERE status = 'RUNNING' AND running_code IS NOT NULL",
            'CREATE INDEX jobs_inflight ON jobs ("partition") WHERE inflight_token IS NOT NULL',
            "CREATE INDEX jobs_status ON jobs (status, id)",
            "CREATE INDEX jobs_target ON jobs (target, id)",
            "CREATE INDEX jobs_code ON jobs (code, id)",
            'CREATE INDEX jobs_key ON jobs ("key", id)',
            # --- schedules ---------------------------------------------------------------
            """
            CREATE TABLE schedules (
                code               TEXT    PRIMARY KEY,
                cron               TEXT    NOT NULL,
                timezone           TEXT    NOT NULL,
                missed_slot_policy TEXT    NOT NULL,
                runs_per_slot      INTEGER NOT NULL,
                enabled            INTEGER NOT NULL,
                cron_override      TEXT,
                next_run_at        TEXT,
                last_run_at        TEXT,
                last_skipped_at    TEXT,
                created_at         TEXT    NOT NULL,
                updated_at         TEXT    NOT NULL,
                stream_version     INTEGER NOT NULL,
                last_hash          TEXT    NOT NULL,
                last_finished_at   TEXT
            )
            """,
            # --- coordination: plain rows, no events ---------------------------------------
            """
            CREATE TABLE partitions (
                "partition" INTEGER PRIMARY KEY,
                owner       TEXT,
                lease_until TEXT
            )
            """,
            "CREATE TABLE workers (pod TEXT PRIMARY KEY, heartbeat_at TEXT NOT NULL)",
            """
            CREATE TABLE checkpoints (
                name     TEXT    PRIMARY KEY,
                position INTEGER NOT NULL,
                state    TEXT
            )
            """,
        ),
    ),
    (
        2,
        (
            # `Store.next_version`: one row per key, counted in the caller's transaction
            "CREATE TABLE counters (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",
        ),
    ),
    (
        3,
        (
            # the targets paused on the pod and since when, as JSON text (its heartbeat
            # writes them; NULL: a pod that does not say)
            "ALTER TABLE workers ADD COLUMN paused TEXT",
        ),
    ),
)

LATEST = MIGRATIONS[-1][0]


def migrate(conn: sqlite3.Connection, now_iso: str) -> int:
    """Apply the missing migrations on `conn` (autocommit mode); return the version."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version"
            " (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)"
        )
        row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
        current = int(row[0] or 0)
        for version, statements in MIGRATIONS:
            if version <= current:
                continue
            for statement in statements:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_version (version, applied_at) VALUES (?, ?)", (version, now_iso)
            )
            current = version
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return current
