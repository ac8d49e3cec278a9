"""The storage port and its adapters (memory, SQLite, PostgreSQL, MongoDB)."""
