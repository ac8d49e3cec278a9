"""Every ```python block of README.md and docs/*.md runs as written (issue 20 item 1).

A ```python block is a complete program: it is saved into an empty folder and run with
this interpreter, twice (a reader runs an example again; it must say so, not fail).
Fragments that need surrounding code are fenced ```py and are not run. The test also
fails when no block was found at all, so it cannot pass by finding nothing.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks() -> list[tuple[str, str]]:
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        for n, match in enumerate(FENCE.finditer(text), start=1):
            line = text.count("\n", 0, match.start()) + 1
            found.append((f"{path.relative_to(ROOT)}:{line} (block {n})", match.group(1)))
    return found


def test_there_are_runnable_examples() -> None:
    assert any(where.startswith("README.md") for where, _ in blocks())


@pytest.mark.parametrize(("where", "code"), blocks(), ids=[w for w, _ in blocks()])
def test_a_documented_program_runs_as_written(where: str, code: str, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(code)
    for run in (1, 2):
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, f"{where}, run {run}:\n{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stderr, f"{where}, run {run}:\n{done.stderr}"
