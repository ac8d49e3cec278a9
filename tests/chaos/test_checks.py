"""The chaos checks themselves can fail: `analyse` on hand-made records and trails.

Pure inputs, no processes: each case breaks one promise and must be counted.
"""

from __future__ import annotations

from datetime import UTC, datetime

from jobledger.domain.events import EventType
from tests.chaos import app
from tests.chaos.harness import Delivered, JobTrail, Summary, analyse

T0 = datetime(2026, 3, 2, 9, 0, 30, tzinfo=UTC)
WINDOW = (T0, datetime(2026, 3, 2, 9, 2, 10, tzinfo=UTC))  # slots 09:01 and 09:02


def trail(
    target: str,
    key: str,
    version: int,
    closed: str | None = EventType.JOB_SUCCEEDED,
    reason: str | None = None,
) -> JobTrail:
    return JobTrail(
        target,
        key,
        version,
        f"chaos:{key}:{version}",
        {"key": key, "version": version},
        closed,
        reason,
    )


def slot(minute: int) -> JobTrail:
    at = f"2026-03-02T09:0{minute}:00.000Z"
    return JobTrail(
        f"schedule:{app.SCHEDULE}",
        None,
        0,
        f"{app.SCHEDULE}:{at}",
        {"slot": at},
        EventType.JOB_SUCCEEDED,
    )


def record(job_id: str, t: JobTrail, offset: int) -> Delivered:
    topic = app.AMO_TOPIC if t.target == app.AMO_TARGET else app.ALO_TOPIC
    return Delivered(topic, 0, offset, 0, t.key, job_id, t.payload)


def run(
    trails: dict[str, JobTrail], order: list[str], business: set[tuple[str, int]] | None = None
) -> Summary:
    summary = Summary("test")
    rows = (
        business
        if business is not None
        else {(t.key, t.version) for t in trails.values() if t.key is not None}
    )
    records = [record(i, trails[i], n) for n, i in enumerate(order)]
    analyse(summary, rows, trails, records, WINDOW, [])
    return summary


def base() -> dict[str, JobTrail]:
    return {
        "a1": trail(app.AMO_TARGET, "k0", 1),
        "a2": trail(app.AMO_TARGET, "k0", 2),
        "b1": trail(app.ALO_TARGET, "k1", 1),
        "b2": trail(app.ALO_TARGET, "k1", 2),
        "s1": slot(1),
        "s2": slot(2),
    }


def test_a_clean_run_passes() -> None:
    summary = run(base(), ["a1", "b1", "a2", "b2", "b1"])  # an at-least-once resend is fine
    assert summary.ok, summary.table()
    assert (summary.alo_duplicates, summary.slots) == (1, 2)


def test_an_at_most_once_duplicate_fails() -> None:
    assert run(base(), ["a1", "a1", "b1", "a2", "b2"]).amo_duplicates == 1


def test_a_newer_version_first_fails() -> None:
    assert run(base(), ["a1", "b2", "b1", "a2"]).order_violations == 1


def test_a_succeeded_job_missing_from_the_topic_is_lost() -> None:
    assert run(base(), ["a1", "b1", "b2"]).lost == 1


def test_a_committed_business_row_without_a_job_is_lost() -> None:
    trails = base()
    rows = {(t.key, t.version) for t in trails.values() if t.key is not None} | {("k9", 1)}
    assert run(trails, ["a1", "a2", "b1", "b2"], rows).lost == 1


def test_an_open_job_and_a_dead_without_reason_are_lost() -> None:
    trails = base()
    trails["a2"] = trail(app.AMO_TARGET, "k0", 2, closed=None)
    trails["a3"] = trail(app.AMO_TARGET, "k0", 3, closed=EventType.JOB_DEAD)
    assert run(trails, ["a1", "b1", "b2"]).lost == 2


def test_an_at_least_once_job_dead_fails() -> None:
    trails = base()
    trails["b2"] = trail(app.ALO_TARGET, "k1", 2, EventType.JOB_DEAD, "outcome_unknown")
    summary = run(trails, ["a1", "a2", "b1"])
    assert summary.alo_undelivered == 1 and summary.lost == 0 and not summary.ok


def test_a_missing_slot_fails() -> None:
    trails = base()
    del trails["s2"]
    assert run(trails, ["a1", "a2", "b1", "b2"]).slot_errors == 1
