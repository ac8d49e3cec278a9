"""The audit commands as an auditor runs them: separate `jobledger` processes on a
SQLite file that the engine wrote and someone then edited with sqlite3."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

from jobledger.core.clock import FakeClock
from jobledger.storage.sqlite import SqliteStore
from tests.contract.projections.test_replay_workload import generate
from tests.factories.postgres import dsn, reachable_dsn

CLI = str(Path(sys.executable).with_name("jobledger"))


def jobledger(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, "--store", f"sqlite:///{db}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def test_migrate_verify_export_replay_on_a_sqlite_file(
    tmp_path: Path, clock: FakeClock
) -> None:
    db = tmp_path / "ledger.db"
    migrated = jobledger(db, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert migrated.stdout.startswith("sqlite: schema version ")
    assert jobledger(db, "migrate").stdout == migrated.stdout  # idempotent

    store = SqliteStore(str(db))
    await store.open()
    try:
        workload = await generate(store, clock, jobs_count=64)
    finally:
        await store.close()

    verified = jobledger(db, "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert f"verified {workload.events} events in 64 streams" in verified.stdout

    out = tmp_path / "all.jsonl"
    exported = jobledger(db, "export", "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == workload.events
    assert [x["position"] for x in lines] == sorted(x["position"] for x in lines)
    assert f"last_position={lines[-1]['position']}" in exported.stderr

    replayed = jobledger(db, "replay")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "read models match the log" in replayed.stdout

    # someone edits the queue table: replay names the row and the field
    with sqlite3.connect(db) as conn:
        job_id, attempts = conn.execute(
            "SELECT id, attempts FROM jobs WHERE status = 'DEAD' ORDER BY id LIMIT 1"
        ).fetchone()
        conn.execute("UPDATE jobs SET attempts = 42 WHERE id = ?", (job_id,))
    drift = jobledger(db, "replay")
    assert drift.returncode == 1
    assert f"jobs {job_id}: attempts is 42 live, {attempts} from the log" in drift.stdout
    repaired = jobledger(db, "replay", "--apply")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "read models replaced by the rebuilt ones" in repaired.stdout
    assert jobledger(db, "replay").returncode == 0

    # someone edits the log: verify names the event
    with sqlite3.connect(db) as conn:
        position, stream, version = conn.execute(
            "SELECT position, stream, version FROM events WHERE type = 'JobDead' LIMIT 1"
        ).fetchone()
        conn.execute(
            "UPDATE events SET data = json_set(data, '$.reason', 'nothing to see')"
            " WHERE position = ?",
            (position,),
        )
    tampered = jobledger(db, "verify")
    assert tampered.returncode == 1
    assert (
        f"problem: {stream} v{version} (position {position}): content does not match its hash"
        in tampered.stdout
    )


def run_cli(store_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, "--store", store_url, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


READ_ONLY_COMMANDS = (("verify",), ("replay",), ("export",))


def test_reading_commands_refuse_a_sqlite_file_that_does_not_exist(tmp_path: Path) -> None:
    for folder in (tmp_path, tmp_path / "missing-folder"):
        db = folder / "nowhere.db"
        for command in READ_ONLY_COMMANDS:
            done = jobledger(db, *command)
            assert done.returncode == 2, (command, done.stdout, done.stderr)
            assert done.stderr == (
                f"jobledger: invalid_config: no SQLite database at {db} (nothing was created)\n"
                if folder.exists()
                else f"jobledger: invalid_config: store URL 'sqlite:///{db}': the folder"
                f" {folder} does not exist (create it first)\n"
            )
            assert "every hash chain holds" not in done.stdout
            assert not db.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_reading_commands_refuse_a_file_that_holds_no_log(tmp_path: Path) -> None:
    db = tmp_path / "business.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY)")
    conn.close()
    before = db.read_bytes()
    not_sqlite = tmp_path / "notes.txt"
    not_sqlite.write_text("not a database\n" * 100)
    for command in READ_ONLY_COMMANDS:
        done = jobledger(db, *command)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert done.stderr.count("\n") == 1
        assert "holds no jobledger log (run `jobledger migrate` to create one)" in done.stderr
        done = jobledger(not_sqlite, *command)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert done.stderr.count("\n") == 1
        assert "is not a readable SQLite database" in done.stderr
    assert db.read_bytes() == before  # no schema was created in the business file
    with sqlite3.connect(db) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    conn.close()
    assert tables == ["users"]


async def test_reading_commands_refuse_a_postgres_database_that_does_not_exist() -> None:
    await reachable_dsn()  # skips when no server runs here
    missing = urlsplit(dsn())._replace(path=f"/jl_missing_{os.getpid()}").geturl()
    for command in READ_ONLY_COMMANDS:
        done = run_cli(missing, *command)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert done.stderr.count("\n") == 1
        assert done.stderr.startswith(
            "jobledger: invalid_config: cannot reach the PostgreSQL store:"
        )
        assert f'database "jl_missing_{os.getpid()}" does not exist' in done.stderr
