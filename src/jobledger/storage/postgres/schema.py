"""Versioned, idempotent schema migrations for the PostgreSQL adapter.

Every table lives in one schema (``jobledger`` by default), so a deployment can keep it
beside its business tables and a test can use a fresh schema of its own. `MIGRATIONS`
only ever grows: a released step is never edited, a change is a new step.
`migrate()` runs the missing steps in one transaction under an advisory lock, so
several processes opening the store at once apply each step exactly once.
"""

from __future__ import annotations

import re
import zlib

from psycopg import AsyncConnection

from jobledger.domain.errors import ConfigError

_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,48}$")

#: bits of an event position below the writing transaction's id (see `docs/postgres.md`)
ORDINAL_BITS = 20

#: (version, statements); ``{s}`` is the quoted schema name
MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (
        1,
        (
            # --- the log --------------------------------------------------------------
            # position = (writing transaction id << 20) + ordinal: see read_log.
            # data/actor are `json`, not `jsonb`: json keeps the exact text the event
            # hash was computed over (jsonb turns 1e+20 into an integer and -0.0 into 0).
            """CREATE TABLE {s}.events (
                position bigint PRIMARY KEY,
                stream text COLLATE "C" NOT NULL,
                version integer NOT NULL,
                type text NOT NULL,
                data json NOT NULL,
                at timestamptz NOT NULL,
                actor json,
                trace_id text,
                prev_hash text NOT NULL,
                hash text NOT NULL,
                dedupe_key text COLLATE "C",
                UNIQUE (stream, version)
            )""",
            "CREATE UNIQUE INDEX events_dedupe ON {s}.events (dedupe_key)"
            " WHERE dedupe_key IS NOT NULL",
            # --- the queue: an inline projection of the open jobs ------------------------
            """CREATE TABLE {s}.jobs (
                id text COLLATE "C" PRIMARY KEY,
                code text COLLATE "C" NOT NULL,
                target text COLLATE "C" NOT NULL,
                lane text NOT NULL,
                key text COLLATE "C",
                partition integer NOT NULL,
                version bigint NOT NULL DEFAULT 0,
                payload jsonb,
                dedupe_key text COLLATE "C" NOT NULL,
                status text NOT NULL,
                attempts integer NOT NULL DEFAULT 0,
                next_run_at timestamptz NOT NULL,
                created_at timestamptz NOT NULL,
                updated_at timestamptz NOT NULL,
                stream_version integer NOT NULL,
                last_hash text NOT NULL,
                headers jsonb,
                trace_id text,
                traceparent text,
                actor jsonb,
                last_error text,
                dead_reason text,
                claimed_by text,
                claim_token text,
                lease_until timestamptz,
                inflight_token text,
                running_code text COLLATE "C",
                closed_at timestamptz,
                order_key bytea NOT NULL
            )""",
            # fast lane read: keyset over (order key, version, id) per partition
            "CREATE INDEX jobs_fast_pending ON {s}.jobs (partition, order_key, version, id)"
            " WHERE status = 'PENDING' AND lane = 'fast'",
            # fast lane timer: earliest next_run_at per partition
            "CREATE INDEX jobs_fast_due ON {s}.jobs (partition, next_run_at)"
            " WHERE status = 'PENDING' AND lane = 'fast'",
            "CREATE INDEX jobs_fast_inflight ON {s}.jobs (partition)"
            " WHERE lane = 'fast' AND inflight_token IS NOT NULL",
            "CREATE INDEX jobs_long_pending ON {s}.jobs (next_run_at, id)"
            " WHERE status = 'PENDING' AND lane = 'long'",
            "CREATE INDEX jobs_running_lease ON {s}.jobs (lease_until) WHERE status = 'RUNNING'",
            "CREATE UNIQUE INDEX jobs_running_code ON {s}.jobs (running_code)"
            " WHERE status = 'RUNNING' AND running_code IS NOT NULL",
            # admin listing, newest first (the primary key serves the unfiltered list)
            "CREATE INDEX jobs_dead ON {s}.jobs (id) WHERE status = 'DEAD'",
            "CREATE INDEX jobs_by_target ON {s}.jobs (target, id)",
            "CREATE INDEX jobs_by_code ON {s}.jobs (code, id)",
            "CREATE INDEX jobs_by_key ON {s}.jobs (key, id) WHERE key IS NOT NULL",
            # --- schedules read model -------------------------------------------------
            """CREATE TABLE {s}.schedules (
                code text COLLATE "C" PRIMARY KEY,
                cron text NOT NULL,
                timezone text NOT NULL,
                missed_slot_policy text NOT NULL,
                runs_per_slot integer NOT NULL,
                enabled boolean NOT NULL,
                cron_override text,
                next_run_at timestamptz,
                last_run_at timestamptz,
                last_skipped_at timestamptz,
                created_at timestamptz NOT NULL,
                updated_at timestamptz NOT NULL,
                stream_version integer NOT NULL,
                last_hash text NOT NULL,
                last_finished_at timestamptz
            )""",
            "CREATE INDEX schedules_due ON {s}.schedules (next_run_at) WHERE enabled",
            # --- coordination (plain rows, no events) -----------------------------------
            """CREATE TABLE {s}.partitions (
                partition integer PRIMARY KEY,
                owner text COLLATE "C",
                lease_until timestamptz
            )""",
            "CREATE INDEX partitions_owner ON {s}.partitions (owner)",
            """CREATE TABLE {s}.workers (
                pod text COLLATE "C" PRIMARY KEY,
                heartbeat_at timestamptz NOT NULL
            )""",
            "CREATE INDEX workers_heartbeat ON {s}.workers (heartbeat_at)",
            """CREATE TABLE {s}.checkpoints (
                name text COLLATE "C" PRIMARY KEY,
                position bigint NOT NULL,
                state jsonb
            )""",
        ),
    ),
    (
        2,
        (
            # An at-most-once mark (inflight_token, claimed_by and the stream's version,
            # hash and time) now touches no indexed column, so PostgreSQL can write it
            # as a heap-only (HOT) update — no new entry in the nine remaining indexes —
            # when the page has room: keep 30 % of each page free for those versions.
            # Takeover finds its in-flight rows through jobs_fast_pending instead.
            "DROP INDEX {s}.jobs_fast_inflight",
            "ALTER TABLE {s}.jobs SET (fillfactor = 70)",
        ),
    ),
    (
        3,
        (
            # A job's payload is stored as its JSON text (json), as the log's data is:
            # jsonb rewrites numbers (1e300 read back as an integer, -0.0 as 0.0), so a
            # handler would not get the payload that was enqueued. Nothing queries
            # inside a payload; rows already stored keep the text jsonb left them.
            "ALTER TABLE {s}.jobs ALTER COLUMN payload TYPE json USING payload::json",
        ),
    ),
    (
        4,
        (
            # `Store.next_version`: one row per key, counted in the caller's transaction;
            # its row lock makes a second asker wait for the first one's commit
            'CREATE TABLE {s}.counters (key text COLLATE "C" PRIMARY KEY, value bigint NOT NULL)',
        ),
    ),
    (
        5,
        (
            # The rows carrying an at-most-once mark, by id: what a takeover reads. An
            # index on `jobs.inflight_token` would make every mark a non-HOT update (see
            # migration 2); without one, the takeover read every PENDING row of the
            # partitions it took, a scan of the whole backlog at each pod start. The
            # statements that set or clear a row's mark keep this table in step, in
            # the same statement (`sql.py`); it holds as many rows as are in flight.
            'CREATE TABLE {s}.inflight (id text COLLATE "C" PRIMARY KEY,'
            " partition integer NOT NULL)",
            "INSERT INTO {s}.inflight (id, partition)"
            " SELECT id, partition FROM {s}.jobs WHERE inflight_token IS NOT NULL",
        ),
    ),
    (
        6,
        (
            # Whether the pod holds a liveness token (an advisory lock, see
            # `liveness.PgLiveness`): only such pods are judged dead by their token;
            # a pod of an earlier release, which holds none, only by its leases
            "ALTER TABLE {s}.workers ADD COLUMN liveness boolean NOT NULL DEFAULT false",
        ),
    ),
    (
        7,
        (
            # the targets paused on the pod and since when, as JSON text (its heartbeat
            # writes them; NULL: a pod that does not say)
            "ALTER TABLE {s}.workers ADD COLUMN paused text",
        ),
    ),
    (
        8,
        (
            # A row per partition naming the last row marked in it, in place of an
            # `inflight` row per mark: the lane marks at most one row a partition at a
            # time, so the mark overwrites its partition's row (a heap-only update, no
            # index entry) and its end writes nothing; the takeover reads the named row
            # and judges it only if it still carries a mark. The `inflight` insert and
            # delete cost every at-most-once job two more writes and an index entry.
            "DROP TABLE {s}.inflight",
            'CREATE TABLE {s}.marks (partition integer PRIMARY KEY, id text COLLATE "C" NOT NULL)',
            "INSERT INTO {s}.marks (partition, id)"
            " SELECT DISTINCT ON (partition) partition, id FROM {s}.jobs"
            " WHERE inflight_token IS NOT NULL ORDER BY partition, id",
        ),
    ),
)

LATEST = MIGRATIONS[-1][0]


def quoted_schema(schema: str) -> str:
    """The schema name checked and quoted for SQL text (it is never a parameter)."""
    if not _IDENT.fullmatch(schema):  # not match: "$" would let a trailing newline in
        raise ConfigError(
            f"PostgreSQL schema {schema!r}: use lowercase letters, digits and _ (max 49)"
        )
    return f'"{schema}"'


def lock_key(schema: str) -> int:
    """The advisory lock key that serialises migrations of one schema."""
    return zlib.crc32(f"jobledger.migrate:{schema}".encode())


async def migrate(conn: AsyncConnection[object], schema: str) -> int:
    """Bring `schema` up to `LATEST`; return the number of steps applied.

    Runs in one transaction: the advisory lock is taken before anything is created,
    so a second process waits, then finds every step recorded and applies none.
    """
    s = quoted_schema(schema)
    applied = 0
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s::bigint)", (lock_key(schema),))
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {s}.schema_version ("
            " version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        cur = await conn.execute(f"SELECT coalesce(max(version), 0) FROM {s}.schema_version")
        row = await cur.fetchone()
        current = int(row[0]) if row else 0  # type: ignore[index]
        for version, statements in MIGRATIONS:
            if version <= current:
                continue
            for statement in statements:
                await conn.execute(statement.format(s=s))
            await conn.execute(f"INSERT INTO {s}.schema_version (version) VALUES (%s)", (version,))
            applied += 1
    return applied
