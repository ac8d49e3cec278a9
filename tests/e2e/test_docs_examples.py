"""Every `python`, `bash` and `sh` block in README.md and docs/*.md runs as a user would
run it, or says why it cannot.

A block may be preceded by one marker comment:

    <!-- example: run -->            (the default) run it: python blocks with `python -`,
                                      shell blocks with `bash -e`, in a fresh directory
    <!-- example: file NAME -->       write it to NAME in that directory for later blocks
    <!-- example: skip REASON -->     do not run it; REASON says why (reported as the skip)
    <!-- example: postgres -->        run it with DATABASE_URL naming a database of its own
                                      on the tests' PostgreSQL server (skipped without one)
    <!-- expect: TEXT -->             the run's output must contain TEXT

The blocks of one document share their files: each run block starts in a new
directory holding every `file` block above it, and runs twice there (a reader runs an
example again; it must not fail then). ```py blocks are python too: a fragment says
so with a skip marker. The virtualenv's `bin` is first on PATH
(`python`, `jobledger`), JOBLEDGER_* variables are cleared.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = {"python": "python", "py": "python", "bash": "bash", "sh": "bash", "console": "bash"}
MARKER = re.compile(r"<!--\s*(example|expect):\s*(.*?)\s*-->")
FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)")


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int
    language: str  # "python" or "bash"
    code: str
    mode: str  # run | file | skip
    argument: str  # the file name, or the reason
    expect: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def blocks_of(doc: Path) -> list[Block]:
    lines = doc.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    markers: list[tuple[str, str]] = []
    i = 0
    while i < len(lines):
        marker = MARKER.fullmatch(lines[i].strip())
        if marker:
            markers.append((marker.group(1), marker.group(2)))
            i += 1
            continue
        fence = FENCE.match(lines[i])
        if not fence:
            if lines[i].strip():
                markers = []  # a marker belongs to the block right below it
            i += 1
            continue
        end = i + 1
        while end < len(lines) and not lines[end].startswith(fence.group(1)):
            end += 1
        language = LANGUAGES.get(fence.group(2).lower())
        if language is not None:
            mode, argument = "run", ""
            expect: list[str] = []
            for kind, text in markers:
                if kind == "expect":
                    expect.append(text)
                else:
                    mode, _, argument = text.partition(" ")
            found.append(
                Block(
                    doc,
                    i + 1,
                    language,
                    "\n".join(lines[i + 1 : end]) + "\n",
                    mode,
                    argument.strip(),
                    tuple(expect),
                )
            )
        markers = []
        i = end + 1
    return found


ALL = [block for doc in DOCS for block in blocks_of(doc)]


def run_block(block: Block, cwd: Path, **extra_env: str) -> tuple[int, str]:
    """Run `block` as a reader would (`python -` or `bash -e` in `cwd`, no JOBLEDGER_*
    variables of the test run, this venv's scripts on PATH): (exit status, output)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBLEDGER_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra_env)
    command = [sys.executable, "-"] if block.language == "python" else ["bash", "-e"]
    done = subprocess.run(
        command,
        input=block.code,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


@contextmanager
def fresh_database() -> Iterator[str]:
    """A `postgresql://` URL of a new database on the tests' server, dropped afterwards;
    skips the test when the server is not reachable."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    from tests.factories.postgres import dsn

    server = dsn()
    try:
        admin = psycopg.connect(server, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        pytest.skip(f"PostgreSQL not reachable at {server}: {exc}")
    name = f"jl_docs_{uuid.uuid4().hex[:10]}"
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    info = conninfo_to_dict(server)
    try:
        yield (
            f"postgresql://{info.get('user', 'postgres')}@{info.get('host', '127.0.0.1')}"
            f":{info.get('port', 5432)}/{name}"
        )
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_the_docs_have_runnable_examples() -> None:
    """The collector finds the README's example (a parser that saw nothing would pass
    every test below vacuously)."""
    readme = [b for b in ALL if b.doc.name == "README.md"]
    assert any(b.mode == "run" for b in readme)
    assert any(b.mode == "file" and b.argument == "welcome.py" for b in readme)


@pytest.mark.parametrize("block", ALL, ids=[b.id for b in ALL])
def test_example(block: Block, tmp_path: Path) -> None:
    assert block.mode in ("run", "file", "skip", "postgres"), f"{block.id}: unknown mode"
    if block.mode == "skip":
        assert block.argument, f"{block.id}: a skipped example must say why"
        pytest.skip(block.argument)
    if block.mode == "file":
        assert block.argument, f"{block.id}: a file example needs a name"
        compile(block.code, block.id, "exec") if block.language == "python" else None
        return
    for earlier in blocks_of(block.doc):
        if earlier.line >= block.line:
            break
        if earlier.mode == "file":
            (tmp_path / earlier.argument).write_text(earlier.code, encoding="utf-8")
    with ExitStack() as stack:
        env = {}
        if block.mode == "postgres":
            env["DATABASE_URL"] = stack.enter_context(fresh_database())
        _run_twice(block, tmp_path, env)


def _run_twice(block: Block, tmp_path: Path, env: dict[str, str]) -> None:
    for run in (1, 2):
        returncode, output = run_block(block, tmp_path, **env)
        assert returncode == 0, f"{block.id} run {run} failed ({returncode}):\n{output}"
        assert not crashes(output), f"{block.id} run {run}:\n{output}"
        for text in block.expect:
            assert text in output, f"{block.id} run {run}: {text!r} not in the output:\n{output}"


def crashes(output: str) -> list[str]:
    """The tracebacks in `output` that are not a failed run's own record: the engine
    logs a failed run as one `job run ...` line followed by the handler's traceback
    (docs/operations.md), which an example about failures shows on purpose; any other
    traceback is an unhandled error."""
    lines = output.splitlines()
    found = []
    for i, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last)"):
            before = lines[i - 1] if i else ""
            if not before.startswith("job run "):
                found.append(before)
    return found
