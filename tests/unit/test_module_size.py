"""House rule: no module of the package over 400 lines (small modules whose names say
what they do). A module that grows past it is split, not exempted."""

from __future__ import annotations

from pathlib import Path

import jobledger

LIMIT = 400
PACKAGE = Path(jobledger.__file__).parent


def test_no_module_of_the_package_is_over_400_lines() -> None:
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 100  # the package itself, not an empty folder
    over = {
        str(path.relative_to(PACKAGE)): n
        for path in modules
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > LIMIT
    }
    assert not over, f"modules over {LIMIT} lines (split them): {over}"
