"""docs/admin.md names, per store, the index each admin-listing filter reads through;
each named index exists in that store's schema with the columns (and the condition)
the page says. The page once promised a `(status, id)` index PostgreSQL never had."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobledger.storage.port import Store, native_handle

ADMIN_MD = Path(__file__).resolve().parents[3] / "docs" / "admin.md"
STORE_COLUMN = {"sqlite": "SQLite", "postgres": "PostgreSQL"}
#: `name (columns)` and an optional ` WHERE condition`, inside backticks
NAMED = re.compile(r"`(\w+) \(([^)]*)\)(?: WHERE ([^`]+))?`")


def listing_table() -> dict[str, dict[str, str]]:
    """{filter: {store column: cell}} of the table after "What a listing costs"."""
    text = ADMIN_MD.read_text()
    section = text[text.index("**What a listing costs.**") :]
    lines = [line for line in section.splitlines()[:20] if line.startswith("|")]
    assert lines, "docs/admin.md: the listing section has no table of indexes"
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) != len(header):
            break
        rows[cells[0].strip("`")] = dict(zip(header, cells, strict=True))
    return rows


def normal(sql: str) -> str:
    """Columns or a condition without quotes, casts, brackets or spacing."""
    sql = re.sub(r"::\w+", "", sql).replace('"', "").replace("(", "").replace(")", "")
    return re.sub(r"\s+", "", sql).lower()


async def index_definitions(store: Store, name: str) -> dict[str, str]:
    """{index name: its CREATE INDEX text} on the jobs table, from the catalog."""
    async with store.writes.transaction() as tx:
        conn = native_handle(tx)
        if name == "sqlite":
            rows = conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'jobs'"
                " AND sql IS NOT NULL"
            ).fetchall()
        else:
            cur = await conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes"
                " WHERE tablename = 'jobs' AND schemaname = %s",
                (store.schema,),  # type: ignore[attr-defined]
            )
            rows = await cur.fetchall()
    return {str(index): str(sql) for index, sql in rows}


async def test_the_listing_indexes_the_docs_name_exist(
    store: Store, request: pytest.FixtureRequest
) -> None:
    name = request.node.callspec.params["store"]
    if name not in STORE_COLUMN:
        pytest.skip("the listing table names the SQL stores' indexes")
    table = listing_table()
    assert {"status", "target", "code", "key"} <= set(table)
    defined = await index_definitions(store, name)
    claimed = 0
    for flt, row in table.items():
        for index, columns, condition in NAMED.findall(row[STORE_COLUMN[name]]):
            claimed += 1
            assert index in defined, f"{flt}: {name} has no index {index}"
            sql = defined[index]
            on = re.search(r"\bON\s+\S+(?:\s+USING\s+\w+)?\s*\((.*?)\)(?:\s+WHERE|$)", sql)
            assert on is not None, sql
            assert normal(on.group(1)) == normal(columns), (flt, index, sql)
            where = re.search(r"\bWHERE\s+(.*)$", sql)
            assert normal(where.group(1) if where else "") == normal(condition), (index, sql)
    assert claimed >= 4
