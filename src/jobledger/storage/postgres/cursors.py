"""One cursor per caller connection for the single enqueue (`WritePath._enqueue_one`).

`conn.execute` makes a new cursor for every statement, and a new cursor looks up a
dumper for each of its parameters' types again: for the enqueue statement's parameters
(six types) that was about a quarter of the engine's client work per enqueue (callgrind,
docs/performance.md "Issue 21: enqueue vs Procrastinate, 2026-12-03"). A cursor kept per
connection keeps the dumpers it found.

The cache is keyed by the connection's id and bounded. A kept cursor holds its
connection (so no other live object can have that id), which also means a caller that
opens a connection per request would keep every closed one: past `size` entries the
cursors of closed connections go, and if that is not enough, all of them.
"""

from __future__ import annotations

from typing import Any

import psycopg

Conn = psycopg.AsyncConnection[Any]
Cursor = psycopg.AsyncCursor[Any]


class CursorCache:
    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._cursors: dict[int, Cursor] = {}

    def __len__(self) -> int:
        return len(self._cursors)

    def cursor(self, conn: Conn) -> Cursor:
        """This connection's cursor: a plain server-side-binding `AsyncCursor`, whatever
        the connection's `cursor_factory` (the statement's `%s` placeholders need one)."""
        cur = self._cursors.get(id(conn))
        if cur is None:
            if len(self._cursors) >= self.size:
                self._evict()
            cur = self._cursors[id(conn)] = psycopg.AsyncCursor(conn)
        return cur

    def clear(self) -> None:
        self._cursors.clear()

    def _evict(self) -> None:
        open_ones = {k: c for k, c in self._cursors.items() if not c.connection.closed}
        self._cursors = open_ones if len(open_ones) < self.size else {}
