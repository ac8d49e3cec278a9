"""The admin page in headless Chromium against a real `jobledger serve` process on a
SQLite file: list, filter, retry a DEAD job, cancel a PENDING one, disable a schedule.
Screenshots go to test-artifacts/."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobledger.engine import Engine
from jobledger.storage.sqlite import SqliteStore
from tests.e2e.app_setup import FLAKY, LATER, OK, register_targets
from tests.e2e.cdp import CHROMIUM, Browser
from tests.e2e.procs import ROOT, jobledger

pytestmark = pytest.mark.browser
ARTIFACTS = ROOT / "test-artifacts"
ADMIN_KEY = "e2e-admin-key-123"
VIEWER_KEY = "e2e-viewer-key-456"


def _need_chromium() -> None:
    if not os.path.exists(CHROMIUM):
        print(f"SKIP reason: {CHROMIUM} is missing (apt-get install -y chromium)")
        pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium")


async def _seed(path: Path) -> dict[str, list[str]]:
    store = SqliteStore(str(path))
    await store.open()
    engine = Engine(store)
    register_targets(engine)
    ids: dict[str, list[str]] = {FLAKY: [], OK: [], LATER: []}
    try:
        for n in range(3):
            for target in (FLAKY, OK):
                async with engine.transaction() as tx:
                    done = await engine.enqueue(
                        target, {"order": n, "kind": target}, tx=tx, key=f"order-{n}"
                    )
                assert done.job_id
                ids[target].append(done.job_id)
        for n in range(2):
            async with engine.transaction() as tx:
                done = await engine.enqueue(
                    LATER, {"remind": n}, tx=tx, run_at=engine.clock.now() + timedelta(hours=1)
                )
            assert done.job_id
            ids[LATER].append(done.job_id)
    finally:
        await store.close()
    return ids


def _wait_dead(http: httpx.Client, count: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        body = http.get("/api/v1/jobs", params={"status": "DEAD"}).json()
        if body["total"] >= count:
            return
        time.sleep(0.2)
    raise AssertionError("the flaky jobs did not go DEAD")


def _history(http: httpx.Client, job_id: str) -> list[dict[str, Any]]:
    body = http.get(f"/api/v1/jobs/{job_id}").json()
    history: list[dict[str, Any]] = body["history"]
    return history


def test_admin_page_in_chromium(tmp_path: Path) -> None:
    _need_chromium()
    db = tmp_path / "e2e.db"
    ids = asyncio.run(_seed(db))
    env = {
        "JOBLEDGER_STORE": f"sqlite:///{db}",
        "JOBLEDGER_API_KEYS": f"{ADMIN_KEY}:admin:alice,{VIEWER_KEY}:viewer:bob",
    }
    with jobledger("serve", "--port", "0", "--setup", "tests.e2e.app_setup:setup", env=env) as proc:
        base = proc.wait_for(r"serving (http://127\.0\.0\.1:\d+)").group(1)
        api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        browser = Browser()
        try:
            _wait_dead(api, 3)
            page = browser.new_page()

            # not signed in: the page sends us to the login form
            page.goto(f"{base}/admin")
            assert "/admin/login" in page.js("location.pathname")
            page.fill("input[name=key]", ADMIN_KEY)
            page.click("form[action='/admin/login'] button")
            assert page.js("location.pathname") == "/admin"
            assert "alice" in page.text("header")

            # the list: every open job, newest first
            rows = page.js(
                "[...document.querySelectorAll('#jobs tbody tr')].map(r => r.dataset.id)"
            )
            assert set(rows) == set(ids[FLAKY]) | set(ids[LATER])  # OK jobs already left
            page.screenshot(ARTIFACTS / "admin-jobs.png")

            # filter on DEAD
            page.js("document.querySelector('select[name=status]').value = 'DEAD'")
            page.click("#filters button[type=submit]")
            assert "status=DEAD" in page.js("location.search")
            statuses = page.js(
                "[...document.querySelectorAll('#jobs tbody tr')].map(r => r.dataset.status)"
            )
            assert statuses == ["DEAD", "DEAD", "DEAD"]
            page.screenshot(ARTIFACTS / "admin-jobs-dead.png")

            # retry a DEAD job
            dead = ids[FLAKY][0]
            page.click(f"tr[data-id='{dead}'] button[data-action=retry]")
            assert "retried" in page.text(".flash")
            retried = [e for e in _history(api, dead) if e["type"] == "JobRetried"]
            assert len(retried) == 1
            assert retried[0]["actor"] == {"id": "alice", "via": "http", "role": "admin"}

            # cancel a PENDING job (due in an hour)
            page.goto(f"{base}/admin?status=PENDING")
            later = ids[LATER][0]
            page.click(f"tr[data-id='{later}'] button[data-action=cancel]")
            assert "cancelled" in page.text(".flash")
            assert api.get(f"/api/v1/jobs/{later}").json()["status"] == "CANCELLED"
            remaining = page.js(
                "[...document.querySelectorAll('#jobs tbody tr')].map(r => r.dataset.id)"
            )
            assert later not in remaining and ids[LATER][1] in remaining

            # job detail: payload and history
            page.goto(f"{base}/admin/jobs/{dead}")
            assert '"kind": "e2e:flaky"' in page.text("#payload")
            history = page.text("#history")
            assert "JobEnqueued" in history and "JobRetried" in history
            page.screenshot(ARTIFACTS / "admin-job-detail.png")

            # disable a schedule, set an override
            page.goto(f"{base}/admin/schedules")
            page.click("tr[data-code=e2e_hourly] button[data-action=disable]")
            assert (
                page.js("document.querySelector('tr[data-code=e2e_hourly]').dataset.enabled")
                == "false"
            )
            page.fill("tr[data-code=e2e_nightly] input[name=cron_override]", "15 4 * * *")
            page.click("tr[data-code=e2e_nightly] form.override button")
            assert "override set" in page.text(".flash")
            page.fill("tr[data-code=e2e_nightly] input[name=cron_override]", "not a cron")
            page.click("tr[data-code=e2e_nightly] form.override button")
            assert "flash-error" in page.js("document.querySelector('.flash').className")
            page.screenshot(ARTIFACTS / "admin-schedules.png")
            schedules = {s["code"]: s for s in api.get("/api/v1/schedules").json()}
            assert schedules["e2e_hourly"]["enabled"] is False
            assert schedules["e2e_nightly"]["cron_override"] == "15 4 * * *"

            # a viewer sees the page but no buttons, and a forged post is refused
            viewer = browser.new_page()
            viewer.goto(f"{base}/admin/login")
            viewer.fill("input[name=key]", VIEWER_KEY)
            viewer.click("form[action='/admin/login'] button")
            assert viewer.js("location.pathname") == "/admin"
            assert viewer.js("document.querySelectorAll('button[data-action]').length") == 0
        finally:
            browser.close()
            api.close()
