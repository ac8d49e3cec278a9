"""Hints that carry rows (`Wake.jobs`): merged while both name their partitions and
stay few; otherwise the subscriber gets a plain hint and reads."""

from __future__ import annotations

from datetime import UTC, datetime

from jobledger.domain import job_commands
from jobledger.domain.jobs import Job, Lane, NewJob, Stamp
from jobledger.storage.feed import EVERYTHING, MAX_HINTED_JOBS, LocalFeed, Wake, merge

AT = datetime(2026, 12, 2, tzinfo=UTC)


def row(n: int) -> Job:
    change = job_commands.enqueued(
        job_id=f"j{n:04d}",
        spec=NewJob("kafka:m", n, key=f"k{n}"),
        code="kafka:m",
        lane=Lane.FAST,
        partition=n % 64,
        dedupe_key=f"d{n}",
        stamp=Stamp(AT),
    )
    assert isinstance(change.row, Job)
    return change.row


def hint(n: int) -> Wake:
    job = row(n)
    return Wake(frozenset({job.partition}), frozenset({Lane.FAST}), False, (job,))


def test_merged_hints_keep_both_rows() -> None:
    merged = merge(hint(1), hint(2))
    assert merged.jobs == (row(1), row(2))
    assert merged.partitions == frozenset({1, 2})


def test_a_hint_for_everything_drops_the_rows() -> None:
    assert merge(hint(1), EVERYTHING).jobs == ()
    assert merge(EVERYTHING, hint(1)).jobs == ()


def test_too_many_rows_make_a_plain_hint() -> None:
    merged: Wake | None = None
    for n in range(MAX_HINTED_JOBS + 1):
        merged = merge(merged, hint(n))
    assert merged is not None and merged.jobs == ()
    assert merged.partitions == frozenset(n % 64 for n in range(MAX_HINTED_JOBS + 1))


async def test_a_busy_subscriber_reads_the_rows_of_every_hint_it_missed() -> None:
    feed = LocalFeed()
    sub = await feed.subscribe().open()
    feed.publish(hint(1))
    feed.publish(Wake(frozenset({5}), frozenset({Lane.FAST})))
    feed.publish(hint(2))
    wake = await anext(sub)
    assert wake.jobs == (row(1), row(2)) and wake.partitions == frozenset({1, 2, 5})
    await sub.aclose()


async def test_a_subscriber_with_a_callback_gets_each_wake_up_as_it_is_published() -> None:
    feed = LocalFeed()
    got: list[Wake] = []
    sub = feed.subscribe()
    sub.on_wake = got.append
    await sub.open()
    feed.publish(hint(1))
    assert got == [hint(1)]  # at once: no task had to run
    assert sub.pending is None and not sub.event.is_set()

    def broken(wake: Wake) -> None:
        raise RuntimeError("boom")

    sub.on_wake = broken  # a callback that raises: the wake-up is queued instead
    feed.publish(hint(2))
    assert (await anext(sub)).jobs == (row(2),)
    feed.close()
    assert [w async for w in sub] == []
