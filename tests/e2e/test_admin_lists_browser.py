"""Finished jobs, find and bulk retry on the admin page, in headless Chromium against a
real `jobledger serve` process on a SQLite file. Screenshots go to test-artifacts/."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest

from jobledger.engine import Engine
from jobledger.storage.sqlite import SqliteStore
from tests.e2e.app_setup import FLAKY, OK, register_targets
from tests.e2e.cdp import Browser, Page
from tests.e2e.procs import ROOT, jobledger
from tests.e2e.test_admin_page_browser import _need_chromium

pytestmark = pytest.mark.browser
ARTIFACTS = ROOT / "test-artifacts"
ADMIN_KEY = "e2e-admin-key-789"


async def _seed(path: Path) -> dict[str, list[str]]:
    store = SqliteStore(str(path))
    await store.open()
    engine = Engine(store)
    register_targets(engine)
    ids: dict[str, list[str]] = {FLAKY: [], OK: []}
    try:
        for n in range(3):
            for target in (FLAKY, OK):
                async with engine.transaction() as tx:
                    done = await engine.enqueue(
                        target, {"n": n}, tx=tx, key=f"order-{n}", dedupe_key=f"{target}:{n}"
                    )
                assert done.job_id
                ids[target].append(done.job_id)
    finally:
        await store.close()
    return ids


def _wait(http: httpx.Client, path: str, params: dict[str, str], count: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if len(http.get(path, params=params).json()["data"]) >= count:
            return
        time.sleep(0.2)
    raise AssertionError(f"{path} {params} did not reach {count} rows")


def _ids(page: Page, table: str) -> list[str]:
    found = page.js(f"[...document.querySelectorAll('#{table} tbody tr')].map(r => r.dataset.id)")
    return list(found)


def _click_confirming(page: Page, selector: str) -> str:
    """Click a form's button, answer its confirmation yes, return the question asked."""
    page.js(
        "window.__old = true;"
        " window.confirm = (q) => { sessionStorage.setItem('asked', q); return true; };"
        f" document.querySelector({json.dumps(selector)}).click()"
    )
    page._wait_new_document()
    return str(page.js("sessionStorage.getItem('asked')"))


def test_finished_find_and_bulk_retry_in_chromium(tmp_path: Path) -> None:
    _need_chromium()
    db = tmp_path / "lists.db"
    ids = asyncio.run(_seed(db))
    env = {"JOBLEDGER_STORE": f"sqlite:///{db}", "JOBLEDGER_API_KEYS": f"{ADMIN_KEY}:admin:alice"}
    with jobledger("serve", "--port", "0", "--setup", "tests.e2e.app_setup:setup", env=env) as proc:
        base = proc.wait_for(r"serving (http://127\.0\.0\.1:\d+)").group(1)
        api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        browser = Browser()
        try:
            _wait(api, "/api/v1/jobs", {"status": "DEAD"}, 3)
            _wait(api, "/api/v1/finished", {"status": "SUCCEEDED"}, 3)
            page = browser.new_page()
            page.goto(f"{base}/admin/login")
            page.fill("input[name=key]", ADMIN_KEY)
            page.click("form[action='/admin/login'] button")

            # the status filter offers the finished statuses; SUCCEEDED lists them
            options = page.js(
                "[...document.querySelectorAll('select[name=status] option')].map(o => o.value)"
            )
            assert {"PENDING", "DEAD", "FINISHED", "SUCCEEDED", "SKIPPED", "CANCELLED"} <= set(
                options
            )
            page.js("document.querySelector('select[name=status]').value = 'SUCCEEDED'")
            page.click("#filters button[type=submit]")
            assert sorted(_ids(page, "finished")) == sorted(ids[OK])  # in the order they ended
            page.screenshot(ARTIFACTS / "admin-finished.png")

            # find a finished job by its dedupe key
            page.fill("#find input[name=q]", f"{OK}:1")
            page.click("#find button[type=submit]")
            assert page.js("location.pathname") == f"/admin/jobs/{ids[OK][1]}"
            assert "SUCCEEDED" in page.text("body")

            # bulk retry every DEAD job: the confirmation names the count
            page.goto(f"{base}/admin?status=DEAD")
            assert "3 DEAD jobs match" in page.text("#bulk")
            asked = _click_confirming(page, "#bulk button[data-action=retry-all]")
            assert asked.startswith("Retry 3 DEAD jobs?")
            assert "3 of 3 DEAD jobs retried" in page.text(".flash")
            page.screenshot(ARTIFACTS / "admin-bulk-retried.png")
            for job_id in ids[FLAKY]:
                history = api.get(f"/api/v1/jobs/{job_id}").json()["history"]
                retried = [e for e in history if e["type"] == "JobRetried"]
                assert [e["actor"]["id"] for e in retried] == ["alice"]
        finally:
            browser.close()
            api.close()
