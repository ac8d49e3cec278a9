"""The operator views in headless Chromium against a real `jobledger serve` process on
a SQLite file: the API reference behind the "API" link, job
history JSON that wraps between tokens, and the viewer told why actions are absent.
Screenshots go to test-artifacts/."""

from __future__ import annotations

import asyncio
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from jobledger.core.clock import FakeClock
from jobledger.engine import Engine
from jobledger.reactors.scheduler import Scheduler
from jobledger.storage.sqlite import SqliteStore
from tests.e2e.app_setup import FLAKY, OK, slot
from tests.e2e.cdp import Browser, Page
from tests.e2e.procs import jobledger
from tests.e2e.test_admin_page_browser import ARTIFACTS, _need_chromium
from tests.e2e.views_setup import DOWN, register_targets

ADMIN_KEY = "e2e-admin-key-789"
VIEWER_KEY = "e2e-viewer-key-012"

#: for every field of the history's data cells: its label, its value's width on one
#: line, the width it has to fit in, its height and the height of one line
MEASURE_FIELDS = """(() => {
  const rows = [];
  for (const dd of document.querySelectorAll('#history dl.event-fields dd')) {
    const probe = document.createElement('span');
    probe.style.whiteSpace = 'nowrap';
    probe.style.position = 'absolute';
    probe.textContent = 'x';
    dd.appendChild(probe);
    const line = probe.getBoundingClientRect().height;
    probe.textContent = dd.firstChild ? dd.firstChild.textContent : '';
    rows.push({label: dd.previousElementSibling.textContent, text: probe.textContent,
               natural: probe.getBoundingClientRect().width, room: dd.clientWidth,
               height: dd.getBoundingClientRect().height, line});
    probe.remove();
  }
  return rows;
})()"""


async def _seed(path: Path) -> list[str]:
    store = SqliteStore(str(path))
    await store.open()
    engine = Engine(store)
    register_targets(engine)
    ids = []
    try:
        for n in range(2):
            async with engine.transaction() as tx:
                done = await engine.enqueue(
                    FLAKY, {"order": n, "note": "a fairly long payload " * 4}, tx=tx, key=f"k{n}"
                )
            assert done.job_id
            ids.append(done.job_id)
        # the hourly schedule was declared three hours ago and no pod ticked since
        past = Engine(store, clock=FakeClock(datetime.now(UTC) - timedelta(hours=3)))
        scheduler = Scheduler(past)
        scheduler.declare("e2e_hourly", "0 * * * *", slot)
        await scheduler.sync()
        for target, count in ((OK, 5), (DOWN, 2)):
            for n in range(count):
                async with engine.transaction() as tx:
                    await engine.enqueue(target, {"n": n}, tx=tx)
    finally:
        await store.close()
    return ids


def _wait_dead(http: httpx.Client, count: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if http.get("/api/v1/jobs", params={"status": "DEAD"}).json()["total"] >= count:
            return
        time.sleep(0.2)
    raise AssertionError("the flaky jobs did not go DEAD")


def _wait_paused(http: httpx.Client) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        body = http.get("/api/v1/dashboard").json()
        if any(row["paused_since"] for row in body["targets"]) and body["totals"]["succeeded"] >= 5:
            return
        time.sleep(0.2)
    raise AssertionError(f"{DOWN} was not paused or the ok jobs did not succeed")


def _wait_slot_ran(http: httpx.Client, code: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        body = http.get(f"/api/v1/schedules/{code}/history").json()
        if any(e.get("outcome") == "ran" for e in body["entries"]):
            return
        time.sleep(0.2)
    raise AssertionError(f"no slot of {code} ran")


def _sign_in(page: Page, base: str, key: str) -> None:
    page.goto(f"{base}/admin/login")
    page.fill("input[name=key]", key)
    page.click("form[action='/admin/login'] button")
    assert page.js("location.pathname") == "/admin"


def test_operator_views_in_chromium(tmp_path: Path) -> None:
    _need_chromium()
    db = tmp_path / "views.db"
    ids = asyncio.run(_seed(db))
    env = {
        "JOBLEDGER_STORE": f"sqlite:///{db}",
        "JOBLEDGER_API_KEYS": f"{ADMIN_KEY}:admin:alice,{VIEWER_KEY}:viewer:bob",
    }
    with jobledger(
        "serve", "--port", "0", "--setup", "tests.e2e.views_setup:setup", env=env
    ) as proc:
        base = proc.wait_for(r"serving (http://127\.0\.0\.1:\d+)").group(1)
        api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        browser = Browser()
        try:
            _wait_dead(api, len(ids))
            page = browser.new_page()
            _sign_in(page, base, ADMIN_KEY)

            # the "API" link opens the rendered reference, every in-page link resolves
            page.click("header nav a[href='/admin/api']")
            assert page.js("location.pathname") == "/admin/api"
            assert page.js("document.querySelectorAll('section.operation').length") >= 10
            dangling = page.js(
                "[...document.querySelectorAll('a[href^=\"#\"]')]"
                ".filter(a => !document.getElementById(a.hash.slice(1))).map(a => a.hash)"
            )
            assert dangling == []
            assert "Bearer" in page.text("#op-post-api-v1-jobs-id-retry")
            page.screenshot(ARTIFACTS / "admin-api.png")

            # history data reads as labelled fields, none broken while it fits its cell
            page = browser.new_page(width=900)
            _sign_in(page, base, ADMIN_KEY)
            page.goto(f"{base}/admin/jobs/{ids[0]}")
            fields = page.js(MEASURE_FIELDS)
            labels = {f["label"] for f in fields}
            assert {"attempts", "error", "reason", "error class"} <= labels  # a JobDead
            split = [
                f for f in fields if f["natural"] <= f["room"] and f["height"] > 1.5 * f["line"]
            ]
            assert split == []
            assert page.js("document.querySelector('.scroll').scrollWidth") <= page.js(
                "document.querySelector('.scroll').clientWidth"
            )
            # each failed attempt in the attempts table, its traceback folded
            assert (
                page.js("document.querySelectorAll('#attempt-history details.traceback').length")
                >= 1
            )
            assert not page.js("document.querySelector('#attempt-history details').open")
            page.screenshot(ARTIFACTS / "admin-history-wrap.png", full_page=False)

            # the dashboard: tiles agree with the API, charts drawn with the stylesheet
            _wait_paused(api)
            _wait_slot_ran(api, "e2e_hourly")  # the last job to settle: the numbers hold still
            page.goto(f"{base}/admin/dashboard")
            numbers = api.get("/api/v1/dashboard").json()
            assert page.text("[data-tile=dead] b") == str(numbers["queue"]["dead"]) == "2"
            assert page.text("[data-tile=pending] b") == str(numbers["queue"]["pending"])
            assert page.text("[data-tile=succeeded] b") == "6"  # 5 ok jobs and a slot
            charts = page.js(
                "[...document.querySelectorAll('svg.chart')].map(s => {"
                " const r = s.getBoundingClientRect(); return [r.width, r.height]; })"
            )
            assert len(charts) == 2 and all(w > 300 and h > 100 for w, h in charts)
            fill = page.js("getComputedStyle(document.querySelector('svg rect.s-dead')).fill")
            assert fill == "rgb(214, 69, 69)"  # the stylesheet reaches the inline SVG
            tips = page.js(
                "[...document.querySelectorAll('#throughput-chart rect.hover title')]"
                ".map(t => t.textContent)"
            )
            succeeded = [int(m.group(1)) for t in tips if (m := re.search(r"succeeded (\d+)", t))]
            assert len(tips) == len(succeeded) == 60 and sum(succeeded) == 6
            assert DOWN in page.text("#paused") and "paused since" in page.text("#paused")
            assert page.js(f"!!document.querySelector('tr[data-target=\"{DOWN}\"] .badge')")
            pods = numbers["workers"]["pods"]  # serve runs one pod: live, holding partitions
            assert len(pods) == 1 and pods[0]["live"] and pods[0]["partitions"] > 0
            assert page.text(f"#pods tr[data-pod='{pods[0]['pod']}']").startswith(pods[0]["pod"])
            page.screenshot(ARTIFACTS / "admin-dashboard.png")
            # live: the page reloads itself every 5 s until live is switched off
            page.click("#live-toggle")
            assert "live=5" in page.js("location.search")
            page.js("window.__before_reload = true")
            deadline = time.monotonic() + 15
            while page.js("window.__before_reload === true") and time.monotonic() < deadline:
                time.sleep(0.25)
            assert page.js("window.__before_reload === undefined")  # a new document
            while page.js("document.readyState") != "complete" and time.monotonic() < deadline:
                time.sleep(0.1)
            page.click("#live-toggle")
            assert "live" not in page.js("location.search")
            page.click("#ranges a:nth-child(2)")
            assert "range=24h" in page.js("location.search")
            assert page.js("document.querySelectorAll('#throughput-chart rect.hover').length") == 24

            # the schedule's history: slots missed while no pod ticked, the newest one ran
            page.goto(f"{base}/admin/schedules")
            page.click("tr[data-code=e2e_hourly] td a")
            assert page.js("location.pathname") == "/admin/schedules/e2e_hourly"
            rows = page.js(
                "[...document.querySelectorAll('#runs tbody tr')]"
                ".map(r => [r.dataset.kind, r.dataset.outcome || r.dataset.event])"
            )
            assert rows[:2] == [["slot", "ran"], ["missed", "missed"]], rows
            assert rows[-1] == ["change", "ScheduleDeclared"]
            assert "no pod ticked them in time" in page.text("tr[data-kind=missed]")
            assert page.text("#slot-counts").count("\n") >= 4
            page.screenshot(ARTIFACTS / "admin-schedule-history.png")

            # a viewer reads why there are no buttons
            viewer = browser.new_page()
            _sign_in(viewer, base, VIEWER_KEY)
            assert "need an admin key" in viewer.text("#viewer-note")
            assert viewer.js("document.querySelectorAll('button[data-action]').length") == 0
            assert viewer.text(f"tr[data-id='{ids[0]}'] .why") == "retry, skip: admin only"
        finally:
            browser.close()
            api.close()
