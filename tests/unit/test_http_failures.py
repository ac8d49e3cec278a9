"""What an operator reads at a glance: a pending job whose last attempt failed shows
its retry, the attempts a job had (class, message, traceback) on the page and in the
API, the dedupe key in the list, event data as fields, and `/admin/jobs`."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest

from jobledger.core.clock import FakeClock
from jobledger.domain import job_outcomes, jobs
from jobledger.domain.job_outcomes import Result, RunResult
from jobledger.reactors.outcome import classify
from jobledger.storage.memory import MemoryStore
from tests.unit.http_helpers import ADMIN, World, client, sign_in, world


@pytest.fixture
async def w(clock: FakeClock) -> AsyncIterator[World]:
    async with world(MemoryStore(), clock) as built:
        yield built


def _lookup() -> None:
    raise KeyError("missing")


async def _run(w: World, job_id: str, *, ok: bool = False) -> None:
    """One run of `job_id` that raised KeyError('missing') (or returned), judged and
    written as the lanes do."""
    if ok:
        run = RunResult(Result.OK, duration_ms=4.0)
    else:
        try:
            _lookup()
        except KeyError as exc:
            run = classify(exc, 7.0)
    policy = job_outcomes.OutcomePolicy(jobs.DeliveryMode.AT_LEAST_ONCE, 6, (1, 2))
    outcome = job_outcomes.decide_outcome(await w.job(job_id), run, policy, w.stamp())
    assert await w.store.writes.apply([outcome.change]) == [True]


async def test_a_pending_job_whose_attempt_failed_shows_its_retry(w: World) -> None:
    job_id = await w.enqueue(dedupe_key="welcome:ada")
    await _run(w, job_id)
    async with client(w.app) as http:
        await sign_in(http)
        page = (await http.get("/admin")).text
        row = re.search(rf'<tr data-id="{job_id}".*?</tr>', page, re.S)
        assert row is not None
        text = row.group(0)
        assert "retry scheduled" in text and "attempt 2 of 6" in text
        assert 'class="error"' not in text  # not a red error on a pending row
        assert "welcome:ada" in text and "<th>Dedupe key</th>" in page
        detail = (await http.get(f"/admin/jobs/{job_id}")).text
        assert "retry scheduled" in detail and "attempt 2 of 6" in detail


async def test_the_detail_page_shows_each_attempt_and_event_fields(w: World) -> None:
    job_id = await w.enqueue()
    await _run(w, job_id)
    w.clock.advance(minutes=1)
    await _run(w, job_id)
    w.clock.advance(minutes=2)
    await _run(w, job_id, ok=True)
    async with client(w.app) as http:
        await sign_in(http)
        page = (await http.get(f"/admin/jobs/{job_id}")).text
    table = page.split('id="attempt-history"', 1)[1].split("</table>", 1)[0]
    assert table.count("builtins.KeyError") == 2
    assert table.count('<details class="traceback"><summary>Traceback</summary>') == 2
    assert "in _lookup" in table and "&#39;missing&#39;" in table
    assert "7 ms" in table and 'data-outcome="succeeded"' in table
    # attempts: three runs happened, three shown
    assert re.search(r"<dt>Attempts</dt><dd>3</dd>", page)
    # the history reads as fields, not raw JSON
    history = page.split('id="history"', 1)[1]
    assert "<dt>next run at</dt>" in history and "<dt>error class</dt>" in history
    assert "<dd>builtins.KeyError</dd>" in history and "<dt>attempt</dt><dd>2</dd>" in history
    assert '"next_run_at"' not in history


async def test_the_api_returns_the_attempt_history(w: World) -> None:
    job_id = await w.enqueue()
    await _run(w, job_id)
    async with client(w.app) as http:
        body = (await http.get(f"/api/v1/jobs/{job_id}", headers=ADMIN)).json()
    (attempt,) = body["attempt_history"]
    assert attempt["error_class"] == "builtins.KeyError"
    assert attempt["message"] == "'missing'" and attempt["attempt"] == 1
    assert attempt["reason"] == "handler_error" and attempt["outcome"] == "failed"
    assert "in _lookup" in attempt["traceback"] and attempt["duration_ms"] == 7.0
    assert attempt["at"].endswith("Z") and attempt["next_run_at"]


async def test_admin_jobs_is_the_job_list(w: World) -> None:
    async with client(w.app) as http:
        moved = await http.get("/admin/jobs?status=DEAD")
        assert moved.status_code == 308
        assert moved.headers["location"] == "/admin?status=DEAD"
        await sign_in(http)
        listed = await http.get("/admin/jobs", follow_redirects=True)
        assert listed.status_code == 200 and "<h1>Jobs" in listed.text
