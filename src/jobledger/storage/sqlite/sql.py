"""Every SQL text of the SQLite store, by concept: the row statements built once from the
row field lists, then the write path, the queue reads, the coordination rows, the log,
the admin reads and the projection state. Statements over a list of values (`IN (...)`)
are built per length by a function of that length."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from jobledger.domain.jobs import TRANSITION_FIELDS
from jobledger.storage import rows

JOB_COLUMNS = (*rows.JOB_FIELDS, "order_key")
#: what an event row is written with, in the order `encode.encode_event` gives them
EVENT_COLUMNS = (
    "stream",
    "version",
    "type",
    "data",
    "at",
    "actor",
    "trace_id",
    "prev_hash",
    "hash",
    "dedupe_key",
)


def q(name: str) -> str:
    return f'"{name}"'


def marks(count: int) -> str:
    """`count` parameter marks, as an `IN (...)` list or a row of VALUES holds them."""
    return ", ".join("?" for _ in range(count))


def upsert_sql(table: str, columns: Sequence[str], key: str) -> str:
    names = ", ".join(q(c) for c in columns)
    marks = ", ".join("?" for _ in columns)
    updates = ", ".join(f"{q(c)} = excluded.{q(c)}" for c in columns if c != key)
    return (
        f"INSERT INTO {table} ({names}) VALUES ({marks})"
        f" ON CONFLICT ({q(key)}) DO UPDATE SET {updates}"
    )


UPSERT_JOB = upsert_sql("jobs", JOB_COLUMNS, "id")
UPDATE_JOB = f"UPDATE jobs SET {', '.join(f'{q(c)} = ?' for c in TRANSITION_FIELDS)} WHERE id = ?"
UPSERT_SCHEDULE = upsert_sql("schedules", rows.SCHEDULE_FIELDS, "code")
INSERT_EVENT = (
    f"INSERT INTO events ({', '.join(q(c) for c in EVENT_COLUMNS)})"
    f" VALUES ({', '.join('?' for _ in EVENT_COLUMNS)})"
)
JOB_COLUMNS_SQL = ", ".join(q(c) for c in rows.JOB_FIELDS)
JOB_SELECT = f"SELECT {JOB_COLUMNS_SQL} FROM jobs"


def job_array_sql(sql: str) -> str:
    """The rows of a `JOB_SELECT` statement as one JSON array of arrays (one row out)."""
    return f"SELECT json_group_array(json_array({JOB_COLUMNS_SQL})) FROM ({sql})"


SCHEDULE_SELECT = f"SELECT {', '.join(q(c) for c in rows.SCHEDULE_FIELDS)} FROM schedules"
#: in the order `encode.decode_event` unpacks
EVENT_SELECT = (
    "SELECT position, stream, version, type, data, at, actor, trace_id, prev_hash, hash FROM events"
)


#: rows per multi-row statement of an outcome batch (SQLite binds at most 32,766
#: parameters; an event row has 10, a job update 1 + the transition fields)
ROWS_PER_STATEMENT = 100


@cache
def insert_events_sql(count: int) -> str:
    """`INSERT_EVENT` for `count` rows in one statement."""
    row = f"({', '.join('?' for _ in EVENT_COLUMNS)})"
    names = ", ".join(q(c) for c in EVENT_COLUMNS)
    return f"INSERT INTO events ({names}) VALUES {', '.join(row for _ in range(count))}"


@cache
def update_jobs_sql(count: int) -> str:
    """`UPDATE_JOB` for `count` rows in one statement: values (id, *TRANSITION_FIELDS)."""
    row = f"({', '.join('?' for _ in range(1 + len(TRANSITION_FIELDS)))})"
    sets = ", ".join(f"{q(c)} = v.column{i + 2}" for i, c in enumerate(TRANSITION_FIELDS))
    return (
        f"UPDATE jobs SET {sets} FROM (VALUES {', '.join(row for _ in range(count))}) AS v"
        " WHERE jobs.id = v.column1"
    )


# --- outcome batches as one statement per kind of write: the rows as one JSON array ------
# (`writes.apply_group`). The SQL text is fixed, so the statement is prepared once per
# connection, and a batch of any size is one step of the engine — one hand-back of the
# GIL by the writer thread — where multi-row VALUES statements take one per 100 rows.
# Every value is a JSON string, integer or null, which `json_extract` returns as the
# same SQL text, integer or NULL that binding it would store.


def _json_column(index: int, source: str = "value") -> str:
    return f"json_extract({source}, '$[{index}]')"


#: the rows' versions, as a JSON object id -> stream_version (one row out: one step)
JOB_VERSIONS_JSON = (
    "SELECT json_group_object(j.id, j.stream_version)"
    " FROM json_each(?) AS v CROSS JOIN jobs AS j ON j.id = v.value"
)
#: events from a JSON array of `EVENT_COLUMNS` arrays, in array order (their positions)
INSERT_EVENTS_JSON = (
    f"INSERT INTO events ({', '.join(q(c) for c in EVENT_COLUMNS)})"
    f" SELECT {', '.join(_json_column(i) for i in range(len(EVENT_COLUMNS)))}"
    " FROM json_each(?) ORDER BY key"
)
#: the job rows whose ids are in a JSON array
DELETE_JOBS_JSON = "DELETE FROM jobs WHERE id IN (SELECT value FROM json_each(?))"
#: `UPDATE_JOB` from a JSON array of [id, *TRANSITION_FIELDS] arrays
UPDATE_JOBS_JSON = (
    "UPDATE jobs SET "
    + ", ".join(
        f"{q(c)} = {_json_column(i + 1, 'v.value')}" for i, c in enumerate(TRANSITION_FIELDS)
    )
    + f" FROM json_each(?) AS v WHERE jobs.id = {_json_column(0, 'v.value')}"
)


# --- the write path (`writes.py`) --------------------------------------------------------

#: the partitions a lease guard's pod holds, as one JSON array (one step of the engine)
HELD_PARTITIONS = (
    'SELECT json_group_array("partition") FROM partitions WHERE owner = ? AND lease_until > ?'
)
#: a stream's version: its row's, else its last event's (a finished job's stream)
JOB_STREAM_VERSION = "SELECT stream_version FROM jobs WHERE id = ?"
SCHEDULE_STREAM_VERSION = "SELECT stream_version FROM schedules WHERE code = ?"
LAST_VERSION = "SELECT max(version) FROM events WHERE stream = ?"
DELETE_JOB = "DELETE FROM jobs WHERE id = ?"
DELETE_SCHEDULE = "DELETE FROM schedules WHERE code = ?"
#: `Writes.next_version`: the key's row in `counters`, counted up in the caller's transaction
NEXT_VERSION = (
    "INSERT INTO counters (key, value) VALUES (?, 1)"
    " ON CONFLICT (key) DO UPDATE SET value = value + 1 RETURNING value"
)


def dedupe_holders_sql(count: int) -> str:
    """(dedupe key, stream) of the events holding `count` given keys."""
    return f"SELECT dedupe_key, stream FROM events WHERE dedupe_key IN ({marks(count)})"


def job_versions_sql(count: int) -> str:
    """(id, stream_version) of `count` given job rows (`JOB_VERSIONS_JSON`'s fallback)."""
    return f"SELECT id, stream_version FROM jobs WHERE id IN ({marks(count)})"


def delete_jobs_sql(count: int) -> str:
    return f"DELETE FROM jobs WHERE id IN ({marks(count)})"


# --- the queue reads (`queue.py`) --------------------------------------------------------


def fast_pending_sql(after: bool) -> str:
    """A page of a partition's PENDING fast rows, after an order key or from the first."""
    return (
        f"{JOB_SELECT} INDEXED BY jobs_fast_pending"
        " WHERE status = 'PENDING' AND lane = 'fast' AND \"partition\" = ?"
        + (" AND order_key > ?" if after else "")
        + " ORDER BY order_key, version, id LIMIT ?"
    )


LONG_CANDIDATES = (
    f"SELECT * FROM (SELECT {JOB_COLUMNS_SQL} FROM jobs INDEXED BY jobs_long_pending"
    " WHERE status = 'PENDING' AND lane = 'long' AND next_run_at <= ?"
    " ORDER BY next_run_at, id LIMIT ?)"
    f" UNION ALL SELECT * FROM (SELECT {JOB_COLUMNS_SQL} FROM jobs"
    " INDEXED BY jobs_running_lease WHERE status = 'RUNNING' AND lane = 'long'"
    " AND lease_until <= ? ORDER BY next_run_at, id LIMIT ?)"
    " ORDER BY next_run_at, id LIMIT ?"
)
RUNNING_CODES = (
    "SELECT running_code FROM jobs INDEXED BY jobs_running_code WHERE status = 'RUNNING'"
    " AND running_code IS NOT NULL AND lease_until > ?"
)
INFLIGHT = (
    f"{JOB_SELECT} INDEXED BY jobs_inflight"
    ' WHERE inflight_token IS NOT NULL AND "partition" = ?'
    " AND lane = 'fast' ORDER BY id"
)
NEXT_DUE_LONG = (
    "SELECT min(next_run_at) FROM jobs INDEXED BY jobs_long_pending"
    " WHERE status = 'PENDING' AND lane = 'long'"
)
#: one index seek per partition (jobs_fast_due), not a scan of the backlog
NEXT_DUE_FAST = (
    "SELECT min(next_run_at) FROM jobs INDEXED BY jobs_fast_due"
    " WHERE status = 'PENDING'"
    " AND lane = 'fast' AND \"partition\" = ?"
)


# --- coordination rows (`coordination.py`) ----------------------------------------------

SEED_PARTITION = 'INSERT OR IGNORE INTO partitions ("partition") VALUES (?)'
HEARTBEAT = (
    "INSERT INTO workers (pod, heartbeat_at, paused) VALUES (?, ?, ?)"
    " ON CONFLICT (pod) DO UPDATE SET heartbeat_at = excluded.heartbeat_at,"
    " paused = excluded.paused"
)
LIVE_PAUSES = (
    "SELECT pod, paused FROM workers WHERE heartbeat_at > ? AND paused IS NOT NULL ORDER BY pod"
)
REMOVE_WORKER = "DELETE FROM workers WHERE pod = ?"
LIVE_WORKERS = "SELECT pod FROM workers WHERE heartbeat_at > ? ORDER BY pod"
LEASES = 'SELECT "partition", owner, lease_until FROM partitions ORDER BY "partition"'
TAKE_PARTITION = (
    'UPDATE partitions SET owner = ?, lease_until = ? WHERE "partition" = ?'
    " AND (owner IS NULL OR owner = ? OR lease_until <= ?)"
)


def renew_partitions_sql(count: int) -> str:
    return (
        "UPDATE partitions SET lease_until = ? WHERE owner = ? AND lease_until > ?"
        f' AND "partition" IN ({marks(count)}) RETURNING "partition"'
    )


def release_partitions_sql(count: int) -> str:
    return (
        "UPDATE partitions SET owner = NULL, lease_until = NULL WHERE owner = ?"
        f' AND "partition" IN ({marks(count)})'
    )


# --- taking over from pods whose liveness token is free (`liveness.py`) -------------------


def remove_workers_sql(count: int) -> str:
    return f"DELETE FROM workers WHERE pod IN ({marks(count)})"


def take_dead_sql(count: int) -> str:
    """The partitions the dead pods hold, live leases included (owner and until first)."""
    return (
        "UPDATE partitions SET owner = ?, lease_until = ?"
        f' WHERE owner IN ({marks(count)}) RETURNING "partition"'
    )


def claims_of_sql(count: int) -> str:
    return (
        f"SELECT {JOB_COLUMNS_SQL} FROM jobs INDEXED BY jobs_running_lease"
        f" WHERE status = 'RUNNING' AND lane = 'long' AND claimed_by IN ({marks(count)})"
        " ORDER BY next_run_at, id"
    )


# --- the log (`log.py`) ------------------------------------------------------------------

READ_STREAM = f"{EVENT_SELECT} WHERE stream = ? ORDER BY version"
#: places per `read_events_at` statement: two parameters each
EVENTS_AT_CHUNK = 400


def events_at_sql(count: int) -> str:
    """The events at `count` (stream, version) places."""
    values = ", ".join("(?, ?)" for _ in range(count))
    return f"{EVENT_SELECT} WHERE (stream, version) IN (VALUES {values})"


#: one writer at a time: a position is only ever handed out after every smaller one has
#: committed, so "greater than the last seen" never skips a late commit
READ_LOG = f"{EVENT_SELECT} WHERE position > ? ORDER BY position LIMIT ?"
READ_LOG_BY_STREAM = (
    f"{EVENT_SELECT} WHERE (stream, version) > (?, ?) ORDER BY stream, version LIMIT ?"
)
READ_LOG_NEWEST = f"{EVENT_SELECT} WHERE position < ? ORDER BY position DESC LIMIT ?"
CLOSED_STREAMS = (
    "SELECT stream FROM events WHERE stream LIKE 'job:%' GROUP BY stream"
    " HAVING max(at) < ? AND NOT EXISTS"
    " (SELECT 1 FROM jobs WHERE jobs.id = substr(stream, 5)) LIMIT ?"
)
DELETE_STREAM = "DELETE FROM events WHERE stream = ?"


# --- the admin reads (`admin.py`) --------------------------------------------------------

GET_JOB = f"{JOB_SELECT} WHERE id = ?"
GET_SCHEDULE = f"{SCHEDULE_SELECT} WHERE code = ?"
LIST_SCHEDULES = f"{SCHEDULE_SELECT} ORDER BY code"


def list_jobs_sql(
    where: Sequence[str], keyset: Sequence[str], *, oldest_first: bool, capped: bool
) -> tuple[str, str]:
    """(page, count) of the admin listing: `where` the filters' conditions, `keyset` the
    cursors'; the page newest first unless `oldest_first`, the count capped by a last
    parameter when `capped`."""
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    page_where = " AND ".join([*where, *keyset])
    page = (
        f"{JOB_SELECT}{' WHERE ' + page_where if page_where else ''}"
        f" ORDER BY id {'ASC' if oldest_first else 'DESC'} LIMIT ? OFFSET ?"
    )
    if capped:
        return page, f"SELECT count(*) FROM (SELECT 1 FROM jobs{clause} LIMIT ?)"
    return page, f"SELECT count(*) FROM jobs{clause}"


# --- projection state (`projections.py`) ------------------------------------------------

LOAD_CHECKPOINT = "SELECT position, state FROM checkpoints WHERE name = ?"
SAVE_CHECKPOINT = (
    "INSERT INTO checkpoints (name, position, state) VALUES (?, ?, ?)"
    " ON CONFLICT (name) DO UPDATE SET position = excluded.position,"
    " state = excluded.state"
)
DELETE_JOBS = "DELETE FROM jobs"
DELETE_SCHEDULES = "DELETE FROM schedules"
