"""docs/architecture.md's module table names every module of the package, and only those.

A row is a part (`domain/`, `storage/`, ..., or "top level"); its modules cell names
the part's modules in backticks, and a subpackage as `` `sqlite/` (`schema.py`, ...) ``
with its own modules inside the parentheses that follow it.
"""

from __future__ import annotations

import re
from pathlib import Path

import jobledger

ROOT = Path(jobledger.__file__).parent
DOC = Path(__file__).parents[2] / "docs" / "architecture.md"
NAME = re.compile(r"`([A-Za-z_][\w]*(?:\.py|/))`")


def table_rows() -> list[tuple[str, str]]:
    """(part, modules cell) of each row of the "The parts" table."""
    text = DOC.read_text(encoding="utf-8").split("## The parts", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] not in ("part", "---"):
            part = cells[0].strip("`")
            rows.append(("" if part == "top level" else part, cells[1]))
    return rows


def group_after(cell: str, start: int) -> tuple[str, int]:
    """The parenthesised text right after `start` (balanced), and where it ends."""
    rest = cell[start:].lstrip()
    if not rest.startswith("("):
        return "", start
    offset = start + (len(cell[start:]) - len(rest))
    depth = 0
    for i, char in enumerate(rest):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            return rest[1:i], offset + i + 1
    raise AssertionError(f"unbalanced parentheses in: {cell[:80]}")


def listed(prefix: str, cell: str) -> set[str]:
    """Module paths (relative to the package) that `cell` names under `prefix`."""
    names: set[str] = set()
    pos = 0
    while match := NAME.search(cell, pos):
        token = match.group(1)
        pos = match.end()
        if token.endswith("/"):
            inner, pos = group_after(cell, pos)
            names |= listed(prefix + token, inner)
        else:
            names.add(prefix + token)
    return names


def modules() -> set[str]:
    return {p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.py") if p.name != "__init__.py"}


def documented() -> set[str]:
    names: set[str] = set()
    for part, cell in table_rows():
        names |= listed(part, cell)
    return names


def test_the_table_has_every_part() -> None:
    parts = {part for part, _ in table_rows()}
    packages = {p.name + "/" for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    assert packages <= parts, f"parts without a row: {sorted(packages - parts)}"
    assert "" in parts  # the top level row


def test_every_module_is_listed() -> None:
    missing = modules() - documented()
    assert not missing, f"add these to docs/architecture.md's module table: {sorted(missing)}"


def test_every_listed_module_exists() -> None:
    stale = documented() - modules()
    assert not stale, f"docs/architecture.md lists modules that do not exist: {sorted(stale)}"


def test_the_parser_reads_nested_groups() -> None:
    cell = "`a.py` (x (y)), `sub/` (`b.py` the b, `c.py` (see `d.py`)), `e.py`"
    assert listed("p/", cell) == {"p/a.py", "p/sub/b.py", "p/sub/c.py", "p/sub/d.py", "p/e.py"}
