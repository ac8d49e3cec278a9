"""The chaos checks themselves can fail: `analyse` on hand-made records and trails.

Pure inputs, no processes: each case breaks one promise and must be counted.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from jobledger.domain.events import EventType
from jobledger.domain.policies import partition_of
from jobledger.storage.memory import MemoryStore
from jobledger.storage.memory.coordination import MemoryCoordination
from tests.chaos import app
from tests.chaos.acks import NO_ACK, NOT_READ, OVERWRITTEN, Ack, AckIndex, load_acks
from tests.chaos.checks import JobTrail, analyse
from tests.chaos.faults import Faults
from tests.chaos.harness import Config, recovery_times, takeover_times, v3_would_miss
from tests.chaos.record import Delivered
from tests.chaos.summary import FaultHit, Summary
from tests.integration.test_multiprocess_lanes import Workers

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


def lost_a2(acks: list[Ack]) -> Summary:
    trails = base()
    records = [record(i, trails[i], n) for n, i in enumerate(["a1", "b1", "b2"])]
    summary = Summary("test")
    rows = {(t.key, t.version) for t in trails.values() if t.key is not None}
    analyse(summary, rows, trails, records, WINDOW, [], (), AckIndex(acks, records))
    assert summary.lost == 1 and not summary.ok  # whatever the cause: fails closed
    return summary


def test_a_lost_job_is_classified_by_the_workers_ack_log() -> None:
    """A job that succeeded with no acknowledgement logged is the engine's
    fault; one acknowledged at an offset never read, or read holding another record,
    points at the broker or the harness. All three fail the run."""
    engine = lost_a2([Ack("b1", app.ALO_TOPIC, 0, 1)])  # someone else's ack only
    assert engine.lost_causes == {NO_ACK: 1}
    assert "no ack (engine defect)" in engine.problems[0]
    unread = lost_a2([Ack("a2", app.AMO_TOPIC, 0, 5)])
    assert unread.lost_causes == {NOT_READ: 1}
    assert "chaos.amo/0@5 (generation 0: not read)" in unread.problems[0]
    overwritten = lost_a2([Ack("a2", app.AMO_TOPIC, 0, 0)])  # a1 is read there
    assert overwritten.lost_causes == {OVERWRITTEN: 1}
    assert "chaos.amo/0@0 (generation 0: a1)" in overwritten.problems[0]
    assert (unread.acks_unread, overwritten.acks_unread, engine.acks_unread) == (1, 1, 0)


def test_an_acknowledged_record_not_read_fails_even_if_the_job_was_read() -> None:
    """An at-least-once job read once (a resend) whose first acknowledged record was not
    read: nothing is lost, but the record has a hole that could hide an at-most-once
    duplicate, so the run fails."""
    trails = base()
    records = [record(i, trails[i], n) for n, i in enumerate(["a1", "b1", "a2", "b2"])]
    acks = [Ack(r.event_id or "", r.topic, 0, r.offset) for r in records]
    summary = Summary("test")
    rows = {(t.key, t.version) for t in trails.values() if t.key is not None}
    analyse(summary, rows, trails, records, WINDOW, [], (), AckIndex(acks, records))
    assert summary.ok, summary.table()
    acks.append(Ack("b1", app.ALO_TOPIC, 0, 9))  # an earlier send of b1, acknowledged
    summary = Summary("test")
    analyse(summary, rows, trails, records, WINDOW, [], (), AckIndex(acks, records))
    assert (summary.lost, summary.acks_unread, summary.ok) == (0, 1, False)
    assert "acknowledged record not read: b1 at chaos.alo/0@9" in summary.problems[0]


def test_the_ack_log_round_trips_and_skips_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "acks.jsonl"
    log_ack = app.ack_logger(str(path))
    meta = SimpleNamespace(topic=app.ALO_TOPIC, partition=2, offset=395)
    log_ack(SimpleNamespace(id="j1"), meta)
    with path.open("a") as out:
        out.write('{"job": "j2", "topic"')  # a worker SIGKILLed mid-write
    (ack,) = load_acks(path)
    assert (ack.job, ack.topic, ack.partition, ack.offset) == ("j1", app.ALO_TOPIC, 2, 395)


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


def test_any_problem_fails_the_run() -> None:
    # a fault that did not inject, or a recorder that did not catch up, is a FAIL
    summary = run(base(), ["a1", "b1", "a2", "b2"])
    assert summary.ok
    summary.problem("fault terminate at 6s did not inject: no worker connection was open")
    assert not summary.ok and "FAIL" in summary.table()


def test_a_run_that_checked_nothing_fails() -> None:
    assert not Summary("test").ok


def dead_amo(marked_by: str | None, marked_s: float | None) -> JobTrail:
    t = trail(app.AMO_TARGET, "k0", 2, EventType.JOB_DEAD, "in flight when taken over")
    if marked_s is not None:
        t.marked_at = T0 + timedelta(seconds=marked_s)
        t.marked_by = marked_by
    t.closed_at = T0 + timedelta(seconds=20)
    return t


def run_with(trails: dict[str, JobTrail], hits: list[FaultHit]) -> Summary:
    summary = Summary("test")
    rows = {(t.key, t.version) for t in trails.values() if t.key is not None}
    order = [i for i in ("a1", "b1", "b2") if i in trails]
    analyse(
        summary,
        rows,
        trails,
        [record(i, trails[i], n) for n, i in enumerate(order)],
        WINDOW,
        [],
        hits,
    )
    return summary


def kill(pod: str, at_s: float) -> FaultHit:
    at = T0 + timedelta(seconds=at_s)
    return FaultHit("kill", at, at + timedelta(milliseconds=50), frozenset({pod}))


def test_an_at_most_once_dead_needs_a_fault_on_its_mark() -> None:
    trails = base()
    trails["a2"] = dead_amo("w1", 5.0)
    justified = run_with(trails, [kill("w1", 5.2)])
    assert justified.ok, justified.table()
    assert (justified.dead_justified, justified.dead_unjustified) == (1, 0)
    for hits in ([], [kill("w2", 5.2)], [kill("w1", 2.0)], [kill("w1", 25.0)]):
        # no fault; another pod killed; a kill before the mark; a kill after the DEAD
        summary = run_with(trails, hits)
        assert summary.dead_unjustified == 1 and not summary.ok, hits
    everyone = FaultHit("broker hang", T0, T0 + timedelta(seconds=8))
    assert run_with(trails, [everyone]).dead_justified == 1
    trails["a2"] = dead_amo(None, None)  # DEAD with no mark at all
    assert run_with(trails, [everyone]).dead_unjustified == 1


def alo_chain(n: int) -> dict[str, JobTrail]:
    return {f"b{v}": trail(app.ALO_TARGET, "k1", v) for v in range(1, n + 1)}


def order_of(trails: dict[str, JobTrail], order: list[str]) -> Summary:
    summary = Summary("test")
    records = [record(i, trails[i], n) for n, i in enumerate(order)]
    analyse(summary, {("k1", t.version) for t in trails.values()}, trails, records, None, [])
    return summary


def test_every_delivery_is_checked_not_only_first_ones() -> None:
    trails = alo_chain(4)
    clean = order_of(trails, ["b1", "b2", "b3", "b2", "b3", "b4"])  # a resend run after a takeover
    assert (clean.order_violations, clean.resend_runs) == (0, 1)
    # first deliveries are in order, but a resend run jumps over v2: two senders interleaved
    interleaved = order_of(trails, ["b1", "b2", "b3", "b1", "b3", "b2", "b4"])
    assert interleaved.order_violations >= 1
    assert any("interleaved" in p for p in interleaved.problems)


class Unlistable(MemoryCoordination):
    async def live_workers(self, since: datetime) -> list[str]:
        raise ConnectionError("database unreachable")


class UnlistableStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.coordination = Unlistable(self.tables)


async def test_a_liveness_check_that_cannot_list_workers_fails(tmp_path: Path) -> None:
    summary = Summary("test")
    config = Config("sqlite", jobs=1, seconds=1, workdir=tmp_path)
    workers = Workers(f"sqlite:///{tmp_path / 'x.db'}", tmp_path / "out.jsonl", 0.0)
    faults = Faults(config, workers, cast(Any, None), cast(Any, None), None, "x", summary)
    await faults.check_live(UnlistableStore(), timeout_s=0.3)
    assert summary.problems and "liveness not checked" in summary.problems[0]
    assert not summary.ok


def test_recovery_is_measured_per_fault_kind() -> None:
    def seen(s: float) -> Delivered:
        return dataclasses.replace(record("a1", base()["a1"], 0), seen_at=T0.timestamp() + s)

    hits = [
        kill("w1", 1.0),
        kill("w2", 5.0),
        FaultHit("broker outage", T0, T0 + timedelta(seconds=9)),
    ]
    times = recovery_times(hits, [seen(s) for s in (12.0, 1.5, 5.25)])
    assert {k: [round(t, 2) for t in v] for k, v in times.items()} == {
        "kill": [0.45, 0.2],  # each kill ends 50 ms after it starts
        "broker outage": [3.0],
    }


def test_takeover_is_the_first_record_of_the_victims_partitions_after_the_kill() -> None:
    """Measured from the survivors' acknowledgements: a record of another partition, or
    one acknowledged before the victim was gone, does not count."""
    mine, other = partition_of("k0", "x"), partition_of("k1", "x")
    assert mine != other
    hit = dataclasses.replace(kill("w1", 1.0), partitions=frozenset({mine}))
    records = [record("a1", base()["a1"], 0), record("b1", base()["b1"], 1)]
    t0 = T0.timestamp()
    acks = [
        Ack("a1", app.AMO_TOPIC, 0, 0, at=t0 + 1.01),  # before the victim was gone
        Ack("b1", app.ALO_TOPIC, 0, 1, at=t0 + 1.2),  # another partition
        Ack("a1", app.AMO_TOPIC, 0, 0, at=t0 + 1.7),
    ]
    assert [round(t, 2) for t in takeover_times([hit], acks, records)] == [0.7]
    assert takeover_times([kill("w1", 1.0)], acks, records) == []  # no partitions read


def test_what_the_v3_quiesce_would_have_missed_is_measured() -> None:
    """Records of a restarted generation read after v3's end-offset condition held are
    counted (and those acknowledged to a worker); a restart where it never held too."""
    t = base()["b1"]
    early = dataclasses.replace(record("b1", t, 0), seen_at=10.0)
    late = dataclasses.replace(record("b2", t, 1), seen_at=12.0)
    unacked = dataclasses.replace(record("x", t, 2), seen_at=13.0)
    other_generation = dataclasses.replace(late, generation=1)
    acks = [Ack("b1", app.ALO_TOPIC, 0, 0), Ack("b2", app.ALO_TOPIC, 0, 1)]
    summary = Summary("test")
    v3_would_miss(summary, [(0, 11.0), (1, None)], [early, late, unacked, other_generation], acks)
    assert (summary.v3_missed, summary.v3_missed_acked, summary.v3_unsettled) == (2, 1, 1)
    assert summary.problems == []  # a measurement, not a check
