"""The PostgreSQL adapter (psycopg 3 async, psycopg_pool, LISTEN/NOTIFY).

    store = PostgresStore("postgresql://127.0.0.1/app", schema="jobledger")
    await store.open()          # pool, idempotent migrations, the LISTEN connection

See docs/postgres.md for the schema, the log positions and the transaction hand-over.
"""

from jobledger.storage.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
