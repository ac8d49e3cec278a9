"""The SQLite adapter: the embedded default store (stdlib `sqlite3`, WAL).

    store = SqliteStore("app.db")
    await store.open()          # the writer and reader connections, idempotent migrations

See docs/storage.md for the schema, the positions and the durability of a commit.
"""

from jobledger.storage.sqlite.store import SqliteStore

__all__ = ["SqliteStore"]
