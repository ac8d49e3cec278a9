"""Enqueue from sync code inside its own transaction (docs/sync-callers.md).

`sync` takes a `sqlite3.Connection` or a psycopg `Connection`; `sqlalchemy` a
SQLAlchemy `Session` or `Connection`; `django` the Django connection of an `atomic()`
block. Each writes the job with the caller's connection and never commits.
"""
