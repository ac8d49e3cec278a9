"""The pure lane planner (domain/lanes.py), the pause map and the outcome classifier."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from jobledger.core.clock import FakeClock
from jobledger.domain import job_commands
from jobledger.domain.errors import DeadNow, SkipRun, TargetOutcomeUnknown, TargetUnreachable
from jobledger.domain.job_outcomes import Result
from jobledger.domain.jobs import DeliveryMode, Job, JobStatus, Lane, NewJob, Stamp
from jobledger.domain.lanes import TargetView, next_page_after, pick_long, plan_batch
from jobledger.observability.observe import Observers
from jobledger.reactors.outcome import classify
from jobledger.reactors.pause import PauseMap

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ALO = TargetView(DeliveryMode.AT_LEAST_ONCE)
AMO = TargetView(DeliveryMode.AT_MOST_ONCE)


def row(key: str, version: int = 0, target: str = "t", **changes: object) -> Job:
    change = job_commands.enqueued(
        job_id=f"{key}-{version}-{target}",
        spec=NewJob(target, key=key, version=version),
        code=target,
        lane=Lane.FAST,
        partition=0,
        dedupe_key=f"{key}:{version}:{target}",
        stamp=Stamp(NOW),
    )
    job = change.row
    assert isinstance(job, Job)
    return replace(job, **changes)  # type: ignore[arg-type]


def test_at_least_once_chains_run_whole_in_version_order() -> None:
    plan = plan_batch([row("a", 2), row("a", 1), row("b", 1)], NOW, {"t": ALO})
    assert [[j.version for j in c] for c in plan.chains] == [[1, 2], [1]]
    assert plan.risky is None and plan.size == 3


def test_one_at_most_once_row_at_risk() -> None:
    plan = plan_batch([row("a", 1), row("a", 2), row("b", 1)], NOW, {"t": AMO})
    assert plan.risky is not None and plan.risky.key == "a" and plan.risky.version == 1
    assert plan.more and plan.size == 1
    assert plan_batch([row("a")], NOW, {"t": AMO}, risk_free=False).size == 0


def test_retry_wait_holds_later_versions_and_sets_the_timer() -> None:
    later = NOW + timedelta(minutes=2)
    plan = plan_batch([row("a", 1, next_run_at=later), row("a", 2), row("b")], NOW, {"t": ALO})
    assert [c[0].key for c in plan.chains] == ["b"]
    assert plan.wake_at == later


def test_in_flight_row_holds_its_chain() -> None:
    plan = plan_batch([row("a", 1, inflight_token="x"), row("a", 2)], NOW, {"t": ALO})
    assert plan.size == 0


def test_paused_target_skipped_except_one_probe() -> None:
    rows = [row("a"), row("b"), row("c", target="u")]
    paused = TargetView(DeliveryMode.AT_LEAST_ONCE, paused=True)
    plan = plan_batch(rows, NOW, {"t": paused, "u": ALO})
    assert [c[0].target for c in plan.chains] == ["u"] and plan.paused_seen == {"t"}
    probing = replace(paused, probe_due=True)
    plan = plan_batch(rows, NOW, {"t": probing, "u": ALO})
    assert sorted(c[0].key for c in plan.chains) == ["a", "c"] and plan.probes == {"t"}


def test_unknown_targets_are_left_alone() -> None:
    assert plan_batch([row("a", target="nope")], NOW, {}).size == 0


def test_next_page_after_keeps_a_cut_key() -> None:
    page = [row("a"), row("b", 1), row("b", 2)]
    assert next_page_after(None, page, []) == "a"  # b may continue: re-read it
    assert next_page_after(None, page, [page[1]]) == "b"  # b is held: skip past it
    assert next_page_after("x", page[1:], []) == "x"


def test_pick_long_one_row_per_exclusive_code() -> None:
    excl = TargetView(DeliveryMode.AT_LEAST_ONCE, exclusive=True)
    rows = [replace(row(str(i), target="s"), lane=Lane.LONG) for i in range(3)]
    rows += [replace(row("x", target="o"), lane=Lane.LONG)]
    picked = pick_long(rows, NOW, {"s": excl, "o": ALO}, set(), 10)
    assert [j.target for j in picked] == ["s", "o"]
    assert [j.target for j in pick_long(rows, NOW, {"s": excl, "o": ALO}, {"s"}, 10)] == ["o"]
    running = replace(rows[3], status=JobStatus.RUNNING, lease_until=NOW + timedelta(seconds=1))
    assert pick_long([running], NOW, {"o": ALO}, set(), 10) == []


def test_pause_map_probes_once_per_interval() -> None:
    clock = FakeClock(NOW)
    pauses = PauseMap(clock, 30, Observers())
    pauses.pause("t")
    assert pauses.is_paused("t") and not pauses.probe_due("t")
    clock.advance(seconds=30)
    assert pauses.probe_due("t")
    pauses.take_probe("t")
    assert not pauses.probe_due("t")
    pauses.resume("t")
    assert not pauses.is_paused("t")


def test_classify_handler_signals() -> None:
    assert classify(None, 1).result == Result.OK
    assert classify(RuntimeError("x"), 1).result == Result.ANSWERED
    assert classify(TargetUnreachable("x"), 1).result == Result.UNREACHABLE
    unknown = classify(TargetOutcomeUnknown("x", target_up=True), 1)
    assert unknown.result == Result.UNKNOWN and unknown.target_up
    assert classify(DeadNow("x"), 1).result == Result.DEAD_NOW

    class Invalid(Exception):
        dead_now = True

    assert classify(Invalid("bad"), 1).result == Result.DEAD_NOW
    skipped = classify(SkipRun("late"), 1)
    assert skipped.result == Result.SKIPPED and skipped.error == "late"


def test_an_error_whose_message_cannot_be_read_is_still_an_outcome() -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no message")

    run = classify(Unprintable(), 1)
    assert run.result == Result.ANSWERED
    assert run.error == "Unprintable (its message could not be read)"
