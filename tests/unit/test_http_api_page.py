"""The small operator fixes: the rendered API reference behind the "API" link, the
viewer told why actions are absent; and no stale "next run" on disabled schedules and DEAD jobs."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest

from jobledger.core.clock import FakeClock
from jobledger.http import openapi
from jobledger.http.openapi_html import body_example, curl_example, schemas, sections, type_of
from jobledger.storage.memory import MemoryStore
from tests.unit.http_helpers import ADMIN_KEY, VIEWER_KEY, World, client, world
from tests.unit.test_http_page import login


@pytest.fixture
async def w(clock: FakeClock) -> AsyncIterator[World]:
    async with world(MemoryStore(), clock) as built:
        yield built


def test_types_are_written_out_with_links() -> None:
    assert str(type_of({"type": ["string", "null"], "format": "date-time"})) == (
        "string (date-time) | null"
    )
    assert str(type_of({"$ref": "#/components/schemas/Job"})) == '<a href="#schema-Job">Job</a>'
    assert str(type_of({"type": "array", "items": {"$ref": "#/components/schemas/Event"}})) == (
        'array of <a href="#schema-Event">Event</a>'
    )
    assert str(type_of({"enum": ["A", "<B>"]})) == "one of <code>A</code>, <code>&lt;B&gt;</code>"
    assert str(type_of({"type": "integer", "minimum": 1, "maximum": 100})) == "integer, ≥ 1, ≤ 100"
    assert str(type_of({"const": True})) == "<code>true</code>"


def test_every_operation_and_schema_is_rendered() -> None:
    document = openapi.document()
    rendered = {(op.path, op.method.lower()) for s in sections(document) for op in s.operations}
    assert rendered == {(path, m) for path, ops in document["paths"].items() for m in ops}
    assert [s.name for s in schemas(document)] == list(document["components"]["schemas"])


async def test_api_link_opens_a_readable_reference(w: World) -> None:
    async with client(w.app) as http:
        assert (await http.get("/admin/api")).status_code == 303  # signed in only
        await login(http, VIEWER_KEY)
        listing = (await http.get("/admin")).text
        assert 'href="/admin/api"' in listing
        page = await http.get("/admin/api")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "<script>" not in page.text.split("</head>")[1]
    anchors = set(re.findall(r'id="([^"]+)"', page.text))
    links = set(re.findall(r'href="#([^"]+)"', page.text))
    assert links and links <= anchors  # every in-page link lands on a section
    for path in openapi.document()["paths"]:
        assert f"<code>{path}</code>" in page.text
    assert "curl -X POST" in page.text and "/api/v1/jobs/{id}/retry" in page.text
    assert 'href="/api/v1/openapi.json"' in page.text


async def test_viewer_is_told_why_actions_are_absent(w: World) -> None:
    dead = await w.dead()
    pending = await w.enqueue()
    async with client(w.app) as http:
        await login(http, VIEWER_KEY)
        listing = (await http.get("/admin")).text
        detail = (await http.get(f"/admin/jobs/{dead}")).text
        schedules = (await http.get("/admin/schedules")).text
    for page in (listing, detail, schedules):
        assert 'id="viewer-note"' in page and "need an <b>admin</b> key" in page
    assert listing.count("retry, skip: admin only") == 1
    assert listing.count("cancel: admin only") == 1 and pending in listing
    assert "retry, skip: admin only" in detail
    assert schedules.count("enable, disable, override: admin only") == 2
    async with client(w.app) as http:
        await login(http, ADMIN_KEY)
        admin_listing = (await http.get("/admin")).text
    assert 'id="viewer-note"' not in admin_listing and "admin only" not in admin_listing


async def test_no_stale_next_run(w: World) -> None:
    dead = await w.dead()
    await w.scheduler.disable("cleanup", None)
    disabled = await w.store.admin.get_schedule("cleanup")
    assert disabled is not None and disabled.next_run_at is not None  # the row keeps it
    async with client(w.app) as http:
        await login(http, ADMIN_KEY)
        detail = (await http.get(f"/admin/jobs/{dead}")).text
        schedules = (await http.get("/admin/schedules")).text
        w.clock.advance(days=1)
        later = (await http.get("/admin/schedules")).text
    assert "DEAD: it runs again only when retried" in detail
    row = re.search(r'<tr data-code="cleanup".*?</tr>', schedules, re.S)
    assert row is not None and "disabled</span></td>" in row.group(0)
    assert disabled.next_run_at.strftime("%Y-%m-%d %H:%M") not in row.group(0)
    nightly = re.search(r'<tr data-code="nightly_report".*?</tr>', later, re.S)
    assert nightly is not None and "overdue" in nightly.group(0)
    assert "overdue" not in schedules


def test_curl_examples_send_the_documented_body() -> None:
    document = openapi.document()
    examples = {(op.method, op.path): op.example for s in sections(document) for op in s.operations}
    put = examples[("PUT", "/api/v1/schedules/{code}/cron_override")]
    assert put.endswith(
        """-d '{"cron_override": "*/5 * * * *"}' "$BASE/api/v1/schedules/{code}/cron_override\""""
    )
    assert "-d" not in examples[("GET", "/api/v1/jobs")]
    assert body_example({}, {"properties": {"a": {"default": 1}, "b": {}}}) == {"a": 1, "b": "…"}
    quoted = curl_example("put", "/x", {"a": "it's"})
    assert "-d '{\"a\": \"it'\\''s\"}'" in quoted  # a quote in the body survives the shell
