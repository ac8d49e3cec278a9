"""Long commands draw a progress line when standard error is a terminal (a real
pseudo-terminal here) and write nothing of it when it is piped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from jobledger.core.clock import FakeClock
from jobledger.storage.sqlite import SqliteStore
from tests.contract.projections.test_replay_workload import generate

CLI = str(Path(sys.executable).with_name("jobledger"))
CLEAR = "\r\x1b[K"


def drain(master: int) -> str:
    """Everything written to the pseudo-terminal whose other end was closed."""
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the other end is closed and everything was read
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode()


def run(db: Path, *args: str, terminal: bool) -> tuple[int, str, str]:
    """(status, stdout, stderr) of `jobledger --store db args…`; stderr on a pty or a pipe."""
    env = {**os.environ, "TERM": "xterm"}
    if not terminal:
        done = subprocess.run(
            [CLI, "--store", f"sqlite:///{db}", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        return done.returncode, done.stdout, done.stderr
    master, slave = os.openpty()
    try:
        done = subprocess.run(
            [CLI, "--store", f"sqlite:///{db}", *args],
            stdout=subprocess.PIPE,
            stderr=slave,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        os.close(slave)
        shown = drain(master)
    finally:
        os.close(master)
    return done.returncode, done.stdout, shown


async def test_progress_on_a_terminal_and_quiet_when_piped(
    tmp_path: Path, clock: FakeClock
) -> None:
    db = tmp_path / "jobs.db"
    store = SqliteStore(str(db))
    await store.open()
    try:
        workload = await generate(store, clock, jobs_count=200)
    finally:
        await store.close()

    commands = {
        "migrate": ("migrate",),
        "verify": ("verify", "--page", "50"),
        "replay": ("replay", "--page", "50"),
        "export": ("export", "--out", str(tmp_path / "all.jsonl"), "--page", "50"),
    }
    for label, args in commands.items():
        status, _, piped = run(db, *args, terminal=False)
        assert status == 0, piped
        assert "\r" not in piped and "\x1b" not in piped, (label, piped)
        status, _, shown = run(db, *args, terminal=True)
        assert status == 0, shown
        assert f"{CLEAR}{label}" in shown, (label, shown)
        assert f"{label}:" not in shown.rsplit(CLEAR, 1)[1]  # erased before the summary
    status, _, shown = run(db, "export", "--page", "50", terminal=True)
    assert f"{CLEAR}export" in shown
    lines = (tmp_path / "all.jsonl").read_text().splitlines()
    assert len(lines) == workload.events

    status, out, shown = run(
        db, "archive", "--before", "2100-01-01", "--dir", str(tmp_path / "a"), terminal=True
    )
    assert status == 0, shown
    assert f"{CLEAR}archive: " in shown and "finished jobs" in shown
    assert out.startswith("archived ")


def test_demo_log_lines_never_glue_onto_its_bar(tmp_path: Path) -> None:
    """The demo's bar and the engine's warnings (failed runs) share one terminal."""
    master, slave = os.openpty()
    try:
        done = subprocess.run(
            [
                CLI,
                "--store",
                f"sqlite:///{tmp_path / 'd.db'}",
                "demo",
                "--no-serve",
                "--orders",
                "4",
            ],
            stdout=slave,
            stderr=slave,
            env={**os.environ, "TERM": "xterm"},
            timeout=60,
            check=False,
        )
        os.close(slave)
        shown = drain(master)
    finally:
        os.close(master)
    assert done.returncode == 0, shown
    assert "jobs settled" in shown and "All 6 demo jobs settled" in shown
    log_lines = shown.count("job run ")
    assert log_lines >= 3  # the webhook's two failures, the ledger's runs
    assert shown.count(CLEAR + "job run ") == log_lines  # each on a cleared line
    assert CLEAR + "All 6 demo jobs settled" in shown
