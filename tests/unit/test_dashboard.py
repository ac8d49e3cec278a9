"""The dashboard's series: queue depth samples folded by the stats
projection equal the read model at the end of each minute, the series fill and filter
as documented, the samples stay within their windows, and the HTTP route and page
serve them (charts drawn as SVG on the server)."""

from __future__ import annotations

import re
from collections import Counter
from datetime import timedelta
from typing import Any

from jobledger.core.clock import FakeClock
from jobledger.http.queries.dashboard_numbers import RANGES, depth_series, outcome_series
from jobledger.http.queries.pods import pods
from jobledger.projections import depth
from jobledger.projections.stats import StatsProjection, catch_up_stats, hour_of, minute_of
from jobledger.storage.memory import MemoryStore
from jobledger.storage.port import Store
from tests.contract.projections.test_replay_workload import generate
from tests.stores import all_jobs
from tests.unit.http_helpers import ADMIN, ADMIN_KEY, VIEWER, client, world
from tests.unit.test_http_page import login


async def depth_now(store: Store) -> dict[str, list[int]]:
    counts = Counter((j.target, j.status.value) for j in await all_jobs(store))
    return {
        target: [counts[(target, s)] for s in depth.STATUSES] for target in {t for t, _ in counts}
    }


async def test_depth_samples_equal_the_read_model_at_each_minute(
    store: Store, clock: FakeClock
) -> None:
    seen: dict[str, dict[str, list[int]]] = {}

    async def record(_round: int) -> None:  # each round's events are at clock.now()
        seen[minute_of(clock.now())] = await depth_now(store)

    await generate(store, clock, jobs_count=40, after_round=record)
    clock.advance(minutes=1)  # the next jobs are enqueued after the minute recorded last
    await generate(store, clock, jobs_count=16, first=40, after_round=record)
    _, state = await catch_up_stats(store)
    samples = state["depth"]["minutes"]
    assert set(seen) <= set(samples)
    for minute, expected in seen.items():
        got = {t: v for t, v in samples[minute].items() if any(v)}
        assert got == {t: v for t, v in expected.items() if any(v)}, minute
    now = {t: v for t, v in (await depth_now(store)).items() if any(v)}
    assert state["depth"]["now"] == now  # the running totals are the read model's
    hours = state["depth"]["hours"]
    assert hours[hour_of(clock.now())] == samples[max(samples)]
    # the same samples whether folded in pages (with look-ups) or in one go
    events = await store.log.read_log(0, limit=100_000)
    projection = StatsProjection()
    assert projection.apply_page(projection.initial(), events, {})["depth"] == state["depth"]


def test_depth_samples_stay_within_their_windows() -> None:
    state: dict[str, Any] = depth.initial()
    start = FakeClock().now()
    for n in range(60 * 24 * 9):  # nine days, a job enqueued every minute
        at = start + timedelta(minutes=n)
        depth.record_depth(state, f"t{n % 3}", "GONE", "PENDING", minute_of(at))
    samples = state["depth"]
    assert len(samples["minutes"]) == depth.KEEP_MINUTES
    assert len(samples["hours"]) == depth.KEEP_HOURS
    assert all(len(sample) <= 3 for sample in samples["minutes"].values())
    assert samples["minutes"][max(samples["minutes"])]["t0"] == [60 * 24 * 3, 0, 0]
    # an event older than the newest sample counts toward the newest one
    newest = max(samples["minutes"])
    depth.record_depth(state, "t0", "PENDING", "DEAD", minute_of(start))
    assert samples["minutes"][newest]["t0"] == [60 * 24 * 3 - 1, 0, 1]
    assert minute_of(start) not in samples["minutes"]
    # a target whose last open job left is dropped from the running totals
    depth.record_depth(state, "solo", "GONE", "RUNNING", newest)
    depth.record_depth(state, "solo", "RUNNING", "GONE", newest)
    assert "solo" not in samples["now"] and samples["minutes"][newest]["solo"] == [0, 0, 0]


def test_depth_series_fills_forward_and_ends_at_now() -> None:
    names = ["09:00", "09:01", "09:02", "09:03", "09:04"]
    samples = {"09:01": {"a": [2, 0, 0], "b": [1, 1, 0]}, "09:03": {"a": [5, 0, 1]}}
    series = depth_series(samples, names, None, [4, 0, 1])
    assert series["pending"] == [None, 3, 3, 5, 4]  # b absent from 09:03: it had none
    assert series["running"] == [None, 1, 1, 0, 0]
    assert depth_series(samples, names, "b", [0, 0, 0])["pending"] == [None, 1, 1, 0, 0]
    earlier = {"08:59": {"a": [7, 0, 0]}, **samples}
    assert depth_series(earlier, names, "a", [4, 0, 1])["pending"] == [7, 2, 2, 5, 4]
    # no sample in or after the window: nothing moved in it
    assert depth_series({"08:00": {"a": [1, 0, 0]}}, names, None, [3, 0, 0])["pending"] == [3] * 5


def test_outcome_series_filters_by_target_and_code() -> None:
    state = {
        "minutes": {"m1": {"a": {"succeeded": 2}, "b": {"succeeded": 1, "dead": 1}}},
        "hours": {"h1": {"a": {"x": {"failed": 3}, "y": {"failed": 1, "succeeded": 4}}}},
    }
    minute = outcome_series(state, RANGES["1h"], ["m0", "m1"], None, None)
    assert minute["succeeded"] == [0, 3] and minute["dead"] == [0, 1]
    assert outcome_series(state, RANGES["1h"], ["m1"], "b", None)["succeeded"] == [1]
    hourly = outcome_series(state, RANGES["24h"], ["h1"], "a", None)
    assert hourly["failed"] == [4] and hourly["succeeded"] == [4]
    assert outcome_series(state, RANGES["24h"], ["h1"], "a", "x")["failed"] == [3]
    assert outcome_series(state, RANGES["24h"], ["h1"], "a", "x")["succeeded"] == [0]
    assert outcome_series(state, RANGES["24h"], ["h1"], "zzz", None)["failed"] == [0]


async def test_dashboard_route_and_page(clock: FakeClock) -> None:
    async with world(MemoryStore(), clock) as w:
        for n in range(3):
            await w.enqueue(key=f"k{n}")
            clock.advance(minutes=2)
            await w.dead("kafka:orders", key=f"d{n}")
        await w.running()
        clock.advance(minutes=1)
        async with client(w.app) as http:
            body = (await http.get("/api/v1/dashboard", headers=VIEWER)).json()
            assert body["queue"] == {
                "pending": 3,
                "running": 1,
                "dead": 3,
                "oldest_pending_age_s": 7 * 60.0,
            }
            assert body["totals"]["dead"] == 3 and len(body["buckets"]) == 60
            assert body["depth"]["dead"][-9:] == [None, 0, 0, 1, 1, 2, 2, 3, 3]
            assert body["paused_known"] is False
            assert body["workers"] == {"live_s": 30.0, "partitions": 0, "pods": []}
            by_target = {row["target"]: row for row in body["targets"]}
            assert by_target["kafka:orders"]["dead"] == 3
            assert by_target["mail:welcome"]["oldest_pending_age_s"] == 7 * 60.0
            hourly = await http.get(
                "/api/v1/dashboard?range=24h&target=kafka:orders", headers=ADMIN
            )
            assert hourly.json()["outcomes"]["dead"][-1] == 3
            assert hourly.json()["queue"]["pending"] == 0
            for bad in ("range=2h", "range=", "zzz=1", "target=a%00b"):
                assert (
                    await http.get(f"/api/v1/dashboard?{bad}", headers=ADMIN)
                ).status_code == 400
            w.app.state.services.paused = lambda: {"kafka:orders": clock.now()}
            paused = (await http.get("/api/v1/dashboard", headers=ADMIN)).json()
            assert paused["paused_known"] is True
            assert {r["target"]: r["paused_since"] for r in paused["targets"]}["kafka:orders"]
            await login(http, ADMIN_KEY)
            page = await http.get("/admin/dashboard?range=1h")
            live = (await http.get("/admin/dashboard?range=24h&live=5")).text
            assert (await http.get("/admin/dashboard?range=2h")).status_code == 400
    assert page.status_code == 200
    assert (
        page.text.count('<svg class="chart"') == 2
        and "<script" not in page.text.split("</head>")[1]
    )
    tiles = dict(re.findall(r'data-tile="([a-z-]+)"><span>[^<]*</span><b>([^<]*)</b>', page.text))
    assert tiles["pending"] == "3" and tiles["dead"] == "3" and tiles["oldest"] == "7 min"
    assert "paused since" in page.text and 'data-target="kafka:orders"' in page.text
    assert (
        "data-refresh-s" not in page.text
        and 'href="/admin/dashboard?range=1h&amp;live=5"' in page.text
    )
    assert 'data-refresh-s="5"' in live and 'href="/admin/dashboard?range=7d&amp;live=5"' in live
    assert 'id="live-toggle" title="reload every 5 s">Live · stop' in live
    assert "No live worker pod" in page.text  # the test's app runs no worker


async def test_pods_live_and_their_partitions(store: Store, clock: FakeClock) -> None:
    now = clock.now()
    await store.coordination.seed_partitions(8)
    await store.coordination.heartbeat("pod-a", now, {"kafka:orders": now - timedelta(minutes=2)})
    await store.coordination.heartbeat("pod-b", now - timedelta(seconds=90))  # stopped beating
    await store.coordination.heartbeat("pod-c", now - timedelta(seconds=5), {})
    for partition in range(5):
        assert await store.coordination.take_partition(
            partition, "pod-a", now, now + timedelta(seconds=30)
        )
    for partition in (5, 6):
        assert await store.coordination.take_partition(
            partition, "pod-b", now, now + timedelta(seconds=10)
        )
    assert await store.coordination.take_partition(
        7, "pod-c", now - timedelta(minutes=5), now
    )  # expired
    found = await pods(store, now, live_s=30)
    assert found == {
        "live_s": 30,
        "partitions": 8,
        "pods": [
            {
                "pod": "pod-a",
                "live": True,
                "partitions": 5,
                "paused": [{"target": "kafka:orders", "since": "2026-03-02T08:58:00.000Z"}],
            },
            {"pod": "pod-b", "live": False, "partitions": 2, "paused": None},
            {"pod": "pod-c", "live": True, "partitions": 0, "paused": []},
        ],
    }


async def test_the_paused_panel_reads_the_pods_heartbeats(clock: FakeClock) -> None:
    """`serve --no-workers` with a separate `worker`: this process runs no worker, yet the
    panel shows each live pod's paused targets and since when, from its heartbeat."""
    async with world(MemoryStore(), clock) as w:
        now = clock.now()
        since = now - timedelta(minutes=3)
        await w.store.coordination.heartbeat("worker-1", now, {"kafka:orders": since})
        await w.store.coordination.heartbeat("worker-2", now, {})
        async with client(w.app) as http:
            body = (await http.get("/api/v1/dashboard", headers=ADMIN)).json()
            await login(http, ADMIN_KEY)
            page = (await http.get("/admin/dashboard")).text
    assert body["paused_known"] is True
    by_target = {r["target"]: r["paused_since"] for r in body["targets"]}
    assert by_target["kafka:orders"] == "2026-03-02T08:57:00.000Z"
    panel = page.split('id="paused"', 1)[1].split("</section>", 1)[0]
    assert "Unknown" not in panel
    assert '<li data-pod="worker-1" data-target="kafka:orders">' in panel
    assert "since 2026-03-02 08:57:00Z" in panel
