"""`jobledger demo` as a real subprocess on a fresh SQLite file: it serves, the jobs
settle (successes, retries, DEAD rows), the orders are business rows, and it exits."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import httpx

from tests.e2e.procs import jobledger


def test_demo_serves_settles_and_exits(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    env = {"JOBLEDGER_API_KEYS": ""}  # none configured: the demo prints a generated key
    with jobledger(
        "--store", f"sqlite:///{db}", "demo", "--port", "0", "--exit-after", "12", env=env
    ) as proc:
        key = proc.wait_for(r"generated an admin key for this run:\n  (\S+)").group(1)
        link = proc.wait_for(r"(http://127\.0\.0\.1:\d+)(/admin/login\?token=\S+)")
        base, signin = link.group(1), link.group(2)
        assert key not in signin  # the key never travels in a URL
        proc.wait_for(r"All (\d+) demo jobs settled", timeout=30)
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}) as http:
            dead = http.get("/api/v1/jobs", params={"status": "DEAD"}).json()
            assert dead["total"] == 3
            assert {row["target"] for row in dead["data"]} == {"demo:ledger-sync"}
            pending = http.get("/api/v1/jobs", params={"status": "PENDING"}).json()
            assert {row["target"] for row in pending["data"]} == {"demo:reminder"}
            schedules = http.get("/api/v1/schedules").json()
            assert [s["code"] for s in schedules] == ["demo_digest"]
            assert httpx.get(f"{base}{signin}").status_code == 303  # one-time link signs in
            assert httpx.get(f"{base}{signin}").status_code == 401  # ... once
            assert (
                http.get("/api/v1/jobs", headers={"Authorization": "Bearer nope-nope"}).status_code
                == 401
            )
        deadline = time.monotonic() + 30
        while proc.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.process.returncode == 0, proc.output
    out = proc.output
    assert "jobledger demo stopped" in out
    # the demo's handlers fail on purpose: their lines say so without a traceback
    assert "Traceback" not in out and "result=failed" in out
    assert "16 succeeded, 3 DEAD" in out
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM demo_orders").fetchone() == (12,)


def test_demo_no_serve_exits_when_settled(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    with jobledger(
        "--store", f"sqlite:///{db}", "demo", "--no-serve", "--orders", "4", "--exit-after", "60"
    ) as proc:
        deadline = time.monotonic() + 45
        while proc.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.process.returncode == 0, proc.output
    assert "All 6 demo jobs settled" in proc.output, proc.output
    assert "5 succeeded, 1 DEAD" in proc.output
    assert "Serving" not in proc.output


def test_demo_no_serve_stopped_early_exits_1(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"  # demo:ledger-sync needs ~3 s of retries to go DEAD
    with jobledger(
        "--store", f"sqlite:///{db}", "demo", "--no-serve", "--orders", "4", "--exit-after", "0.5"
    ) as proc:
        deadline = time.monotonic() + 45
        while proc.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.process.returncode == 1, proc.output
    assert "of 6 demo jobs settled." in proc.output, proc.output
    assert "All 6 demo jobs settled" not in proc.output
