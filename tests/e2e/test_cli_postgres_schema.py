"""Every command reaches a PostgreSQL schema other than `jobledger`, named in the store
URL (`?schema=`, `options=-csearch_path=`), the config file or the environment; real
`jobledger` processes against the machine's PostgreSQL (skipped when it is not there)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import psycopg
from psycopg.conninfo import conninfo_to_dict

from jobledger.core.clock import FakeClock
from jobledger.storage.postgres import PostgresStore
from tests.contract.projections.test_replay_workload import generate
from tests.factories.postgres import fresh_schema

CLI = str(Path(sys.executable).with_name("jobledger"))


def as_url(conninfo: str) -> str:
    """postgresql://user[:password]@host:port/dbname for the factories' conninfo."""
    c = conninfo_to_dict(conninfo)
    auth = quote(str(c.get("user", "postgres")))
    if c.get("password"):
        auth += ":" + quote(str(c["password"]))
    return f"postgresql://{auth}@{c.get('host', '127.0.0.1')}:{c.get('port', 5432)}/{c['dbname']}"


def env(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("JOBLEDGER_")}
    clean.pop("PYTHONPATH", None)
    return {**clean, "PYTHONUNBUFFERED": "1", **extra}


def jobledger(
    *args: str, cwd: Path, extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, *args],
        cwd=cwd,
        env=env(**(extra or {})),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def tables_in(conninfo: str, schema: str) -> set[str]:
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        )
        return {row[0] for row in await cur.fetchall()}


async def test_every_audit_command_reaches_the_configured_schema(
    tmp_path: Path, clock: FakeClock
) -> None:
    async with fresh_schema() as (conninfo, schema):
        base = as_url(conninfo)
        by_query = ["--store", f"{base}?schema={schema}"]
        by_options = ["--store", f"{base}?options=-csearch_path%3D{schema}"]
        (tmp_path / "jobledger.toml").write_text(
            f'store_url = "{base}"\npostgres_schema = "{schema}"\n'
        )
        by_file = ["--config", "jobledger.toml"]

        migrated = jobledger(*by_query, "migrate", cwd=tmp_path)
        assert migrated.returncode == 0, migrated.stderr
        assert migrated.stdout.startswith("postgres: schema version ")
        assert {"events", "jobs"} <= await tables_in(conninfo, schema)

        store = PostgresStore(conninfo, schema=schema)
        await store.open()
        try:
            workload = await generate(store, clock, jobs_count=16)
        finally:
            await store.close()

        for where in (by_query, by_options, by_file):
            verified = jobledger(*where, "verify", cwd=tmp_path)
            assert verified.returncode == 0, (where, verified.stdout, verified.stderr)
            assert f"verified {workload.events} events in 16 streams" in verified.stdout
            replayed = jobledger("replay", *where, cwd=tmp_path)  # options after the command
            assert replayed.returncode == 0, (where, replayed.stdout, replayed.stderr)
            assert "read models match the log" in replayed.stdout
            exported = jobledger(*where, "export", "--out", "all.jsonl", cwd=tmp_path)
            assert exported.returncode == 0, exported.stderr
            assert len((tmp_path / "all.jsonl").read_text().splitlines()) == workload.events
        # the environment, as a container would set it
        by_env = {"JOBLEDGER_STORE": base, "JOBLEDGER_POSTGRES_SCHEMA": schema}
        verified = jobledger("verify", cwd=tmp_path, extra=by_env)
        assert f"verified {workload.events} events in 16 streams" in verified.stdout
        archived = jobledger(*by_file, "archive", "--older-than-days", "1", cwd=tmp_path)
        assert archived.returncode == 0, archived.stderr

        # without the schema the same database holds no log there: the setting mattered
        elsewhere = jobledger(
            "--store", f"{base}?schema=jl_nowhere_{os.getpid()}", "verify", cwd=tmp_path
        )
        assert elsewhere.returncode == 2
        assert "holds no jobledger log" in elsewhere.stderr
        clash = jobledger(*by_file, "--store", f"{base}?schema=other", "verify", cwd=tmp_path)
        assert clash.returncode == 2
        assert clash.stderr.count("\n") == 1
        assert f"schema 'other', the postgres_schema setting '{schema}'" in clash.stderr


APP = """
import jobledger

app = jobledger.App()


@app.target("mail:welcome", lane="long", delivery_mode="at_least_once")
def send(job):
    with open("delivered.txt", "a") as out:
        out.write(f"{job.payload['user']}\\n")
"""

ENQUEUE = """
import asyncio, sys
import jobledger

app = jobledger.App(store=sys.argv[1])
app.declare_target("mail:welcome", lane="long")

async def main():
    await app.start(workers=False)
    async with app.transaction() as tx:      # business SQL finds its table by search_path
        await tx.native.execute("CREATE TABLE users (name text)")
        await tx.native.execute("INSERT INTO users VALUES ('ada')")
        await app.enqueue("mail:welcome", {"user": 7}, tx=tx)
    await app.stop()

asyncio.run(main())
"""


async def test_a_worker_and_an_app_deliver_in_the_configured_schema(tmp_path: Path) -> None:
    async with fresh_schema() as (conninfo, schema):
        base = as_url(conninfo)
        (tmp_path / "myjobs.py").write_text(APP)
        (tmp_path / "enqueue.py").write_text(ENQUEUE)
        url = f"{base}?options=-csearch_path%3D{schema}"
        done = subprocess.run(
            [sys.executable, "enqueue.py", url],
            cwd=tmp_path,
            env=env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert {"events", "jobs", "users"} <= await tables_in(conninfo, schema)

        (tmp_path / "jobledger.toml").write_text(
            f'store_url = "{base}"\npostgres_schema = "{schema}"\n'
        )
        worker = subprocess.Popen(
            [CLI, "worker", "--config", "jobledger.toml", "--app", "myjobs"],
            cwd=tmp_path,
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not (tmp_path / "delivered.txt").exists():
                assert worker.poll() is None, worker.communicate()[0]
                time.sleep(0.05)
        finally:
            worker.send_signal(signal.SIGTERM)
            output = worker.communicate(timeout=30)[0]
        assert (tmp_path / "delivered.txt").read_text() == "7\n", output
        assert worker.returncode == 0, output
