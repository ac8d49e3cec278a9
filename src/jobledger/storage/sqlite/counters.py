"""`Store.next_version` on SQLite: the key's row in `counters`, counted up on the caller's
connection, inside its transaction (SQLite has one writer: a second transaction begins
only once this one has ended)."""

from __future__ import annotations

import sqlite3

NEXT_VERSION = (
    "INSERT INTO counters (key, value) VALUES (?, 1)"
    " ON CONFLICT (key) DO UPDATE SET value = value + 1 RETURNING value"
)


def next_version_on(conn: sqlite3.Connection, key: str) -> int:
    """The key's next number on `conn` (a sync caller's connection or the store's own)."""
    cursor = conn.cursor()
    cursor.row_factory = None
    (value,) = cursor.execute(NEXT_VERSION, (key,)).fetchone()
    return int(value)
