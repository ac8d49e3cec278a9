"""The change-stream watcher (storage/mongodb/watch.py): wake-ups from change events, and
a watcher that never dies — proven against a client pointed at a closed loopback port."""

from __future__ import annotations

import asyncio
import logging
import random

import pytest
from pymongo import AsyncMongoClient

from jobledger.domain.jobs import Lane
from jobledger.storage.feed import LocalFeed
from jobledger.storage.mongodb import watch
from jobledger.storage.mongodb.codec import database
from tests.net import free_port


def test_backoff_is_exponential_with_full_jitter_and_capped() -> None:
    rng = random.Random(7)
    for attempt in range(1, 40):
        ceiling = min(30.0, 0.25 * 2 ** (attempt - 1))
        delays = [watch.backoff_delay(attempt, rng) for _ in range(50)]
        assert all(0.0 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 1  # jittered
    assert max(watch.backoff_delay(60, rng) for _ in range(200)) > 15.0  # reaches the cap


def test_change_stream_pipeline_watches_every_row_write_of_the_read_models() -> None:
    pipeline = watch.change_stream_pipeline()
    match = pipeline[0]["$match"]
    assert match["ns.coll"] == {"$in": ["jobs", "schedules"]}
    assert match["operationType"] == {"$in": ["insert", "replace", "update"]}
    project = pipeline[1]["$project"]
    assert project["fullDocument.partition"] == 1 and project["fullDocument.lane"] == 1
    assert project["updateDescription.updatedFields.partition"] == 1


def test_update_events_look_up_the_row_and_resume_after_the_saved_token() -> None:
    """An update's updatedFields list only the fields whose value changed, and a job's
    partition and lane never change: the stream must look the row up to name them."""
    assert watch.watch_options({"_data": "82"}) == {
        "full_document": "updateLookup",
        "resume_after": {"_data": "82"},
    }
    assert watch.watch_options(None)["resume_after"] is None
    project = watch.change_stream_pipeline()[1]["$project"]
    assert project["fullDocument.partition"] == 1 and project["fullDocument.lane"] == 1


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {
                "ns": {"coll": "jobs"},
                "operationType": "insert",
                "fullDocument": {"partition": 12, "lane": "fast"},
            },
            (frozenset({12}), frozenset({Lane.FAST}), False),
        ),
        (  # an update event with its looked-up document (watch_options), projected
            {
                "ns": {"coll": "jobs"},
                "operationType": "update",
                "fullDocument": {"partition": 0, "lane": "long"},
                "updateDescription": {"updatedFields": {}},
            },
            (frozenset({0}), frozenset({Lane.LONG}), False),
        ),
        (  # the row was deleted before the lookup: every partition may have work
            {
                "ns": {"coll": "jobs"},
                "operationType": "update",
                "fullDocument": None,
                "updateDescription": {"updatedFields": {}},
            },
            (None, None, False),
        ),
        (
            {"ns": {"coll": "schedules"}, "operationType": "replace"},
            (frozenset(), frozenset(), True),
        ),
        ({"ns": {"coll": "jobs"}, "operationType": "update"}, (None, None, False)),
    ],
)
def test_wake_from_change(change: dict[str, object], expected: tuple[object, object, bool]) -> None:
    wake = watch.wake_from_change(change)
    assert (wake.partitions, wake.lanes, wake.schedules) == expected


async def test_watcher_keeps_retrying_while_the_server_is_unreachable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_port()  # nothing listens there
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(
        f"mongodb://127.0.0.1:{port}/?serverSelectionTimeoutMS=50&connectTimeoutMS=50",
        tz_aware=True,
    )
    feed = LocalFeed()
    watcher = watch.ChangeWatcher(
        database(client, "jobledger_test"), feed, backoff_base_s=0.01, backoff_cap_s=0.05
    )
    caplog.set_level(logging.WARNING, logger="jobledger.storage.mongodb")
    task = asyncio.create_task(watcher.run())
    try:
        for _ in range(200):
            await asyncio.sleep(0.05)
            if watcher.failures >= 5:
                break
        assert not task.done(), "the watcher died"
        assert watcher.failures >= 5 and watcher.consecutive_failures >= 5
        assert watcher.streams_opened == 0
        retries = [r for r in caplog.records if "change stream failed" in r.getMessage()]
        assert len(retries) >= 5
        assert "ServerSelectionTimeoutError" in retries[0].getMessage()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        feed.close()
        await client.close()
