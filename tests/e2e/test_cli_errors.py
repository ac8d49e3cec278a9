"""A user's mistakes end in one line and exit status 2, not a traceback: each case runs
the real `jobledger` command in a subprocess, as a user would type it."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.net import free_port

MAIN = "from jobledger.cli import main; raise SystemExit(main())"


def run(
    *args: str, cwd: Path, block: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`jobledger args…`; `block`: a module made unimportable first (an extra that is
    not installed), the way `import` fails when the package is absent."""
    prelude = f"import sys; sys.modules[{block!r}] = None; " if block else ""
    return subprocess.run(
        [sys.executable, "-c", prelude + MAIN, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The single error line of a command that failed as it should."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    assert "Task exception was never retrieved" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stdout == "", done.stdout
    return done.stderr


@contextmanager
def taken_port() -> Iterator[int]:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


@pytest.mark.parametrize(
    ("url", "block", "extra"),
    [
        ("postgresql://127.0.0.1/jobs", "psycopg", "postgres"),
        ("mongodb://127.0.0.1/?replicaSet=rs", "pymongo", "mongo"),
    ],
)
def test_a_store_whose_extra_is_not_installed_names_the_extra(
    tmp_path: Path, url: str, block: str, extra: str
) -> None:
    for command in (("migrate",), ("verify",), ("worker",), ("serve", "--port", "0")):
        line = one_line(run("--store", url, *command, cwd=tmp_path, block=block))
        assert f"the {block} package is not installed" in line
        assert f"pip install 'jobledger[{extra}]'" in line


def test_a_sqlite_file_in_a_missing_folder_is_one_line_and_creates_nothing(
    tmp_path: Path,
) -> None:
    url = "sqlite:///no/such/folder/jobs.db"
    commands = (
        ("--store", url, "migrate"),
        ("--store", url, "worker"),
        ("serve", "--store", url, "--port", "0"),
        ("--store", url, "demo", "--no-serve"),
        ("--store", url, "archive", "--older-than-days", "1"),
    )
    for command in commands:
        line = one_line(run(*command, cwd=tmp_path))
        assert "the folder no/such/folder does not exist (create it first)" in line, line
    assert list(tmp_path.iterdir()) == []


def test_a_taken_port_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'jobs.db'}"
    with taken_port() as port:
        for command in (("serve",), ("demo",)):
            done = run("--store", db, *command, "--port", str(port), cwd=tmp_path)
            line = one_line(done)
            assert line == (
                f"jobledger: invalid_config: cannot listen on 127.0.0.1:{port}: the address"
                " is already in use (another server on that port? try --port)\n"
            )
    assert not (tmp_path / "jobs.db").exists()  # nothing was opened


def test_an_unreachable_postgres_server_is_one_line_within_seconds(tmp_path: Path) -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/jobs"
    for command in (("migrate",), ("archive", "--older-than-days", "1"), ("worker",)):
        # the pool would wait 30 s and print a traceback; the probe answers at once
        line = one_line(run("--store", url, *command, cwd=tmp_path, timeout=20))
        assert line.startswith("jobledger: invalid_config: cannot reach the PostgreSQL store:")
        assert "Connection refused" in line


def test_an_unreachable_mongodb_store_is_one_line_within_seconds(tmp_path: Path) -> None:
    url = f"mongodb://127.0.0.1:{free_port()}/jobs?directConnection=true"
    for command in (("migrate",), ("verify",)):
        # the driver would select a server for 30 s, then print a traceback
        line = one_line(run("--store", url, *command, cwd=tmp_path, timeout=20))
        assert line.startswith("jobledger: invalid_config: cannot reach the MongoDB store:")


def test_a_wrong_app_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "shop.py").write_text("application = 1\n")
    cases = {  # (a missing module or attribute: tests/e2e/test_cli_app.py)
        "shop:application": "application is a int, not a jobledger.App",
        ":app": "expected module:attribute",
    }
    for spec, expected in cases.items():
        line = one_line(run("--store", "memory://", "worker", "--app", spec, cwd=tmp_path))
        assert expected in line, line


def test_an_output_file_in_a_missing_folder_is_one_line(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'jobs.db'}"
    assert run("--store", db, "migrate", cwd=tmp_path).returncode == 0
    line = one_line(run("--store", db, "export", "--out", "gone/all.jsonl", cwd=tmp_path))
    assert line == "jobledger: No such file or directory: gone/all.jsonl\n"


def test_an_unreachable_reference_mongodb_is_one_line(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'jobs.db'}"
    source = f"mongodb://127.0.0.1:{free_port()}/reference?directConnection=true"
    line = one_line(run("--store", db, "import-reference", "--from", source, cwd=tmp_path))
    assert line.startswith("jobledger: invalid_config: cannot reach the reference MongoDB")
