"""A stop that cuts long-lane runs short: the pure judgement of each row
(`job_outcomes.stopped_while_running`), the MongoDB write of a given-back row (on a
recording fake: no server here), and the second interrupt's one line and exit.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from datetime import timedelta
from typing import Any, cast

import pytest

from jobledger.cli._options import seconds
from jobledger.cli._stopping import abandon_line, stop_on_signals
from jobledger.domain import job_commands, job_outcomes, jobs
from jobledger.domain.events import EventType
from jobledger.domain.job_outcomes import OutcomeLabel
from jobledger.domain.jobs import DeliveryMode, JobStatus, Lane, Stamp
from jobledger.reactors.runtime import InFlight
from jobledger.storage.mongodb import builders as b
from jobledger.storage.mongodb.writes import write_changes
from tests.unit.test_mongodb_builders import NOW, STAMP, _new
from tests.unit.test_mongodb_store import Db


def _running(exclusive: bool = True) -> jobs.Job:
    job = _new(target="schedule:nightly", lane=Lane.LONG).row
    assert job is not None
    claimed = job_commands.claim(
        job, token="tok", pod="p", lease=timedelta(minutes=5), exclusive=exclusive, stamp=STAMP
    )
    assert isinstance(claimed.row, jobs.Job)
    return claimed.row


def test_an_at_least_once_row_is_given_back_pending_due_now_with_its_attempts() -> None:
    running = _running()
    later = Stamp(NOW + timedelta(seconds=40), STAMP.actor, STAMP.trace_id)
    outcome = job_outcomes.stopped_while_running(running, DeliveryMode.AT_LEAST_ONCE, later)
    assert outcome is not None and outcome.label is OutcomeLabel.REQUEUED and not outcome.dead
    (event,) = outcome.change.events
    assert event.type == EventType.JOB_REQUEUED
    assert event.data["reason"] == "stopped" and event.data["token"] == "tok"
    row = outcome.change.row
    assert isinstance(row, jobs.Job)
    assert row.status == JobStatus.PENDING and row.attempts == running.attempts
    assert row.next_run_at == later.at
    assert row.claim_token is row.claimed_by is row.lease_until is row.running_code is None
    assert outcome.change.expected_version == running.stream_version  # a compare-and-set


def test_an_at_most_once_row_is_left_claimed() -> None:
    assert job_outcomes.stopped_while_running(_running(), DeliveryMode.AT_MOST_ONCE, STAMP) is None


async def test_mongodb_writes_a_given_back_row_as_one_compare_and_set_update() -> None:
    running = _running()
    outcome = job_outcomes.stopped_while_running(running, DeliveryMode.AT_LEAST_ONCE, STAMP)
    assert outcome is not None
    change = outcome.change
    assert b.running_code_conflict_query(change) is None  # it leaves RUNNING: no code check
    assert b.cas_query(change) == {"_id": running.id, "stream_version": running.stream_version}
    fields = b.row_update(change)["$set"]
    assert fields["status"] == "PENDING" and fields["next_run_at"] == NOW
    assert fields["claim_token"] is None and fields["running_code"] is None
    stored = {**b.job_doc(running), **fields}
    assert b.job_from_doc(stored) == change.row  # the update leaves the given-back row
    db = Db()
    assert await write_changes(cast(Any, db), cast(Any, "tx"), [change], None) == [True]
    writes = [(coll, op, ids) for coll, op, ids in db.calls if op != "find"]
    assert writes == [
        ("jobs", "update_one", running.id),
        ("events", "insert_many", [b.event_id(change.stream, running.stream_version + 1)]),
    ]


@pytest.mark.parametrize(
    ("flight", "line"),
    [
        (
            InFlight(2, 1, 0, tokens=False),
            "second interrupt: abandoning 3 running jobs (2 at-least-once will be redelivered"
            " when their 300 s lease ends, 1 at-most-once will be judged DEAD then (it may"
            " have run)); exiting now",
        ),
        (
            InFlight(1, 0, 2, tokens=True),
            "second interrupt: abandoning 1 running job (1 at-least-once will be redelivered"
            " once another pod finds this one gone); 2 fast-lane partitions mid-round, judged"
            " by their next owner; exiting now",
        ),
        (
            InFlight(0, 0, 0, tokens=True),
            "second interrupt: abandoning 0 running jobs; exiting now",
        ),
    ],
)
def test_the_second_interrupt_says_what_it_abandons_in_one_line(
    flight: InFlight, line: str
) -> None:
    assert abandon_line(flight, 300.0) == line


async def test_the_first_signal_starts_the_stop_and_the_second_calls_then() -> None:
    stop = asyncio.Event()
    seen: list[int] = []
    with stop_on_signals(stop, then=seen.append):
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.wait_for(stop.wait(), 5)
        assert seen == []
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.01)
    assert seen == [int(signal.SIGTERM)]


def test_the_stop_timeout_option_takes_positive_seconds() -> None:
    assert seconds("2.5") == 2.5
    for bad in ("0", "-1", "soon", "nan"):
        with pytest.raises(argparse.ArgumentTypeError, match=r"seconds|greater than 0"):
            seconds(bad)
