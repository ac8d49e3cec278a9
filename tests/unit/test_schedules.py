"""domain/schedules/: events, the fold, boot sync, admin commands, tick and slot-run
decisions — pure, no store."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from jobledger.domain.chain import verify_chain
from jobledger.domain.errors import InvalidArgument, InvalidCron
from jobledger.domain.events import Actor, Event, EventType
from jobledger.domain.jobs import Change, Job, JobStatus, Lane, Stamp
from jobledger.domain.schedules import commands as sched
from jobledger.domain.schedules import slot_run, tick
from jobledger.domain.schedules.changes import apply_schedule
from jobledger.domain.schedules.row import MissedSlotPolicy, Schedule
from jobledger.domain.schedules.spec import ScheduleSpec, make_spec

T0 = datetime(2026, 3, 2, 9, 0, 10, tzinfo=UTC)
GRACE = timedelta(seconds=60)
FIVE_MIN = timedelta(minutes=5)
ADMIN = Actor(id="alice", via="http", role="admin")


def fold_schedule(events: list[Event]) -> Schedule | None:
    """The row a whole schedule stream folds into (what replay rebuilds)."""
    row: Schedule | None = None
    for event in events:
        row = apply_schedule(row, event)
    return row


def at(delta: timedelta = timedelta(0), actor: Actor | None = None) -> Stamp:
    return Stamp(T0 + delta, actor, "trace")


def spec(cron: str = "0 * * * *", **kw: object) -> ScheduleSpec:
    args: dict[str, object] = {
        "timezone": "UTC",
        "missed_slot_policy": None,
        "runs_per_slot": 3,
        "now": T0,
        "skip_max_interval": FIVE_MIN,
    }
    args.update(kw)
    return make_spec("report", cron, **args)  # type: ignore[arg-type]


class History:
    """Applies changes one after another and keeps every event, like a store would."""

    def __init__(self, change: Change) -> None:
        self.events = list(change.events)
        self.row: Schedule = change.row

    def add(self, change: Change | None) -> Schedule:
        assert change is not None
        assert change.expected_version == self.row.stream_version
        self.events.extend(change.events)
        self.row = change.row
        return self.row

    def check_replay(self) -> None:
        assert fold_schedule(self.events) == self.row
        assert verify_chain(self.events) == []


def declared(cron: str = "0 * * * *", **kw: object) -> History:
    return History(sched.declared(spec(cron, **kw), at()))


def plan(row: Schedule, delta: timedelta) -> tick.TickPlan | None:
    return tick.plan_tick(
        row,
        T0 + delta,
        grace=GRACE,
        stamp=at(delta),
        job_id=f"job{delta.total_seconds():.0f}",
        partitions=64,
    )


# --- declaration -------------------------------------------------------------------------


def test_default_policy_is_skip_up_to_five_minutes() -> None:
    assert spec("*/5 * * * *").missed_slot_policy == MissedSlotPolicy.SKIP
    assert spec("* * * * *").missed_slot_policy == MissedSlotPolicy.SKIP
    assert spec("*/10 * * * *").missed_slot_policy == MissedSlotPolicy.RUN_ONCE
    assert spec("0 2 * * *").missed_slot_policy == MissedSlotPolicy.RUN_ONCE
    assert spec("* * * * *", missed_slot_policy="run_once").missed_slot_policy == "run_once"


@pytest.mark.parametrize(
    ("kw", "error"),
    [
        ({"missed_slot_policy": "sometimes"}, InvalidArgument),
        ({"runs_per_slot": 0}, InvalidArgument),
        ({"runs_per_slot": True}, InvalidArgument),
        ({"timezone": "Nowhere/City"}, InvalidArgument),
    ],
)
def test_bad_declarations(kw: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error):
        spec(**kw)  # type: ignore[arg-type]


def test_bad_code_and_bad_cron() -> None:
    with pytest.raises(InvalidArgument):
        make_spec(
            "a:b",
            "* * * * *",
            timezone="UTC",
            missed_slot_policy=None,
            runs_per_slot=3,
            now=T0,
            skip_max_interval=FIVE_MIN,
        )
    with pytest.raises(InvalidCron):
        spec("61 * * * *")


def test_declared_row_is_enabled_with_its_next_slot() -> None:
    h = declared("0 9 * * *", timezone="Asia/Bangkok")
    row = h.row
    assert row.enabled and row.cron_override is None
    assert row.next_run_at == datetime(2026, 3, 3, 2, 0, tzinfo=UTC)  # 09:00 +07:00
    assert row.stream == "schedule:report" and row.stream_version == 1
    assert h.events[0].type == EventType.SCHEDULE_DECLARED
    h.check_replay()


# --- boot sync -----------------------------------------------------------------------------


def test_sync_rewrites_code_owned_fields_only() -> None:
    h = declared("0 * * * *")
    h.add(sched.disabled(h.row, at(actor=ADMIN)))
    h.add(sched.override_set(h.row, "30 * * * *", at(actor=ADMIN)))
    assert sched.synced(h.row, spec("0 * * * *"), at()) is None  # nothing changed
    change = sched.synced(h.row, spec("*/30 * * * *", runs_per_slot=5), at(timedelta(hours=1)))
    row = h.add(change)
    assert (row.cron, row.runs_per_slot) == ("*/30 * * * *", 5)
    assert not row.enabled and row.cron_override == "30 * * * *"  # admin fields kept
    assert row.next_run_at == datetime(2026, 3, 2, 9, 30, tzinfo=UTC)  # override still rules
    event = h.events[-1]
    assert event.type == EventType.SCHEDULE_SYNCED
    assert event.data["changed"] == ["cron", "runs_per_slot"]
    assert event.data["previous"] == {"cron": "0 * * * *", "runs_per_slot": 3}
    h.check_replay()


def test_sync_moves_next_run_at_when_the_effective_cron_changes() -> None:
    h = declared("0 * * * *")
    row = h.add(sched.synced(h.row, spec("15 * * * *"), at(timedelta(minutes=1))))
    assert row.next_run_at == datetime(2026, 3, 2, 9, 15, tzinfo=UTC)
    row = h.add(sched.synced(row, spec("15 * * * *", timezone="Asia/Kolkata"), at()))
    assert row.next_run_at == datetime(2026, 3, 2, 9, 45, tzinfo=UTC)  # :15 at +05:30
    h.check_replay()


# --- admin -------------------------------------------------------------------------------


def test_enable_disable_override() -> None:
    h = declared("0 * * * *")
    assert sched.enabled(h.row, at()) is None  # already enabled: nothing to write
    h.add(sched.disabled(h.row, at(actor=ADMIN)))
    assert sched.disabled(h.row, at()) is None
    assert h.events[-1].actor == ADMIN
    # re-enabled three hours later: the slots missed while disabled are dropped
    row = h.add(sched.enabled(h.row, at(timedelta(hours=3), actor=ADMIN)))
    assert row.enabled and row.next_run_at == datetime(2026, 3, 2, 13, 0, tzinfo=UTC)
    row = h.add(sched.override_set(row, "*/20 * * * *", at(timedelta(hours=3), actor=ADMIN)))
    assert row.cron_override == "*/20 * * * *" and row.effective_cron == "*/20 * * * *"
    assert row.next_run_at == datetime(2026, 3, 2, 12, 20, tzinfo=UTC)
    with pytest.raises(InvalidCron):
        sched.override_set(row, "every day", at())
    row = h.add(sched.override_cleared(row, at(timedelta(hours=3), actor=ADMIN)))
    assert row.cron_override is None and row.next_run_at == datetime(2026, 3, 2, 13, 0, tzinfo=UTC)
    assert sched.override_cleared(row, at()) is None
    h.check_replay()


# --- the tick ------------------------------------------------------------------------------


def test_not_due_or_disabled_plans_nothing() -> None:
    h = declared("0 * * * *")  # next 10:00
    assert plan(h.row, timedelta(minutes=59)) is None
    h.add(sched.disabled(h.row, at()))
    assert plan(h.row, timedelta(hours=5)) is None


def test_on_time_tick_enqueues_the_slot_job() -> None:
    h = declared("0 * * * *")
    p = plan(h.row, timedelta(minutes=59, seconds=55))  # 10:00:05
    assert p is not None and p.missed is None and p.job is not None
    slot = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
    assert p.slot == slot
    job: Job = p.job.row
    assert job.code == "report" and job.target == "schedule:report" and job.lane == Lane.LONG
    assert job.payload == {"slot": "2026-03-02T10:00:00.000Z"}
    assert job.dedupe_key == "report:2026-03-02T10:00:00.000Z" == p.job.dedupe_key
    assert job.status == JobStatus.PENDING
    row = h.add(p.schedule)
    assert row.next_run_at == datetime(2026, 3, 2, 11, 0, tzinfo=UTC)
    assert [e.type for e in p.schedule.events] == [EventType.SCHEDULE_SLOT_ENQUEUED]
    assert p.schedule.events[0].data["job_id"] == job.id
    h.check_replay()


def test_missed_slots_under_run_once_enqueue_only_the_newest() -> None:
    h = declared("0 * * * *")  # run_once (hourly)
    p = plan(h.row, timedelta(hours=3, minutes=20))  # 12:20:10: 10, 11, 12 due
    assert p is not None and p.job is not None and p.missed is not None
    assert (p.missed.count, p.reason) == (3, "missed")
    assert p.slot == datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
    types = [e.type for e in p.schedule.events]
    assert types == [EventType.SCHEDULE_SLOTS_MISSED, EventType.SCHEDULE_SLOT_ENQUEUED]
    missed = p.schedule.events[0].data
    assert missed["count"] == 3 and missed["first_slot"] == "2026-03-02T10:00:00.000Z"
    assert missed["action"] == "enqueue_newest"
    row = h.add(p.schedule)
    assert row.next_run_at == datetime(2026, 3, 2, 13, 0, tzinfo=UTC)
    h.check_replay()


def test_one_late_slot_is_reported_and_still_enqueued_under_run_once() -> None:
    h = declared("0 * * * *")
    p = plan(h.row, timedelta(minutes=62))  # 10:02:10, one slot 130 s late
    assert p is not None and p.job is not None and p.missed is not None
    assert (p.missed.count, p.reason) == (1, "late")


def test_skip_policy_late_enqueues_nothing_and_records_last_skipped_at() -> None:
    h = declared("*/5 * * * *")  # skip by default; next 09:05
    p = plan(h.row, timedelta(minutes=17))  # 09:17:10: 09:05, 09:10, 09:15 due; newest 130 s late
    assert p is not None and p.job is None and p.missed is not None
    assert p.missed.count == 3
    types = [e.type for e in p.schedule.events]
    assert types == [EventType.SCHEDULE_SLOTS_MISSED, EventType.SCHEDULE_SLOT_SKIPPED]
    row = h.add(p.schedule)
    assert row.last_skipped_at == datetime(2026, 3, 2, 9, 15, tzinfo=UTC)  # G8
    assert row.next_run_at == datetime(2026, 3, 2, 9, 20, tzinfo=UTC)
    assert p.schedule.events[1].data["stage"] == "tick"
    h.check_replay()


def test_skip_policy_with_a_fresh_newest_slot_enqueues_it() -> None:
    h = declared("*/5 * * * *")
    p = plan(h.row, timedelta(minutes=10, seconds=20))  # 09:10:30: 09:05 and 09:10 (30 s old)
    assert p is not None and p.job is not None and p.missed is not None
    assert p.missed.count == 2 and p.slot == datetime(2026, 3, 2, 9, 10, tzinfo=UTC)


def test_a_month_of_downtime_counts_up_to_the_cap_and_finds_the_newest() -> None:
    h = declared("* * * * *", missed_slot_policy="run_once")
    p = plan(h.row, timedelta(days=31, seconds=5))
    assert p is not None and p.missed is not None and p.job is not None
    assert not p.missed.exact and p.missed.count == tick.MAX_COUNTED_SLOTS
    assert p.slot == datetime(2026, 4, 2, 9, 0, tzinfo=UTC)
    assert p.schedule.row.next_run_at == datetime(2026, 4, 2, 9, 1, tzinfo=UTC)


# --- the slot run --------------------------------------------------------------------------


def slot_job(row: Schedule, slot: datetime, created: datetime, attempts: int = 0) -> Job:
    change = tick.slot_job(
        row.code, slot, job_id="j1", partitions=64, stamp=Stamp(created, None, None)
    )
    job: Job = change.row
    return replace(job, attempts=attempts)


SLOT = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


def decide(row: Schedule, job: Job, now: datetime, newer: bool = False) -> slot_run.SlotVerdict:
    return slot_run.decide_slot_run(
        row, row.missed_slot_policy, job, now, grace=GRACE, newer_pending=newer
    )


def test_slot_run_on_time_or_retry_always_runs() -> None:
    row = declared("*/5 * * * *").row
    job = slot_job(row, SLOT, SLOT)
    assert decide(row, job, SLOT + timedelta(seconds=60)).run
    late = SLOT + timedelta(minutes=30)
    assert not decide(row, job, late).run
    assert decide(row, replace(job, attempts=1), late).run  # a retry inside the slot


def test_skip_reasons_tell_what_happened() -> None:
    row = declared("*/5 * * * *").row
    late = SLOT + timedelta(minutes=3)
    # enqueued on time, previous slot finished long ago: no worker took it
    v = decide(row, slot_job(row, SLOT, SLOT), late)
    assert (v.run, v.reason) == (False, "not_started")
    assert v.skip_text.startswith("late: ")
    # enqueued late: no pod ticked in time
    v = decide(row, slot_job(row, SLOT, SLOT + timedelta(seconds=90)), late)
    assert v.reason == "late_enqueued"
    # the previous slot ran past this slot's grace
    busy = replace(row, last_finished_at=SLOT + timedelta(minutes=2, seconds=50))
    v = decide(busy, slot_job(row, SLOT, SLOT), late)
    assert v.reason == "previous_slot_running" and "ran until" in (v.detail or "")


def test_run_once_late_runs_unless_a_newer_slot_is_pending() -> None:
    row = declared("0 * * * *").row
    job = slot_job(row, SLOT, SLOT)
    late = SLOT + timedelta(minutes=10)
    assert slot_run.needs_newer_slot_check(row.missed_slot_policy, job, late, grace=GRACE)
    assert not slot_run.needs_newer_slot_check(row.missed_slot_policy, job, SLOT, grace=GRACE)
    assert decide(row, job, late, newer=False).run
    v = decide(row, job, late, newer=True)
    assert (v.run, v.reason) == (False, "newer_slot_pending")


def test_slot_records_keep_the_maximum() -> None:
    h = declared("0 * * * *")
    row = h.row
    stamp = at(timedelta(hours=2))
    later, earlier = slot_job(row, SLOT + timedelta(hours=1), SLOT), slot_job(row, SLOT, SLOT)
    row = h.add(slot_run.slot_ran(row, later, stamp))
    row = h.add(slot_run.slot_ran(row, earlier, stamp))
    assert row.last_run_at == SLOT + timedelta(hours=1)
    assert row.last_finished_at == stamp.at
    verdict = slot_run.SlotVerdict(False, "not_started", "slow")
    row = h.add(slot_run.slot_skipped(row, earlier, verdict, stamp))
    assert row.last_skipped_at == SLOT
    assert h.events[-1].data["reason"] == "not_started"
    h.check_replay()


def test_fold_rejects_events_out_of_order() -> None:
    h = declared()
    with pytest.raises(ValueError, match="declared twice"):
        apply_schedule(h.row, h.events[0])
    disabled = sched.disabled(h.row, at())
    assert disabled is not None
    with pytest.raises(ValueError, match="before ScheduleDeclared"):
        apply_schedule(None, disabled.events[0])


def test_a_code_whose_slot_dedupe_keys_would_pass_the_size_limit_is_refused() -> None:
    from jobledger.domain.enqueue_rules import MAX_TEXT_BYTES
    from jobledger.domain.schedules.spec import MAX_CODE_BYTES
    from jobledger.domain.schedules.tick import slot_dedupe_key

    longest = "c" * MAX_CODE_BYTES
    assert len(slot_dedupe_key(longest, T0).encode()) == MAX_TEXT_BYTES
    make_spec(longest, "0 * * * *", timezone="UTC", missed_slot_policy=None,
              runs_per_slot=3, now=T0, skip_max_interval=FIVE_MIN)  # fmt: skip
    with pytest.raises(InvalidArgument, match="over 487 bytes"):
        make_spec(longest + "c", "0 * * * *", timezone="UTC", missed_slot_policy=None,
                  runs_per_slot=3, now=T0, skip_max_interval=FIVE_MIN)  # fmt: skip
