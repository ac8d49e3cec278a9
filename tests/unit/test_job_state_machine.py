"""The job state machine against a small independent model (hypothesis, stateful).

Random commands drive a handful of jobs through `domain.jobs`: enqueue, dispatch,
claim, renew, an outcome of every `Result`, take-over, reclaim after lease expiry,
retry, skip, cancel and expire. A command the domain refuses must raise
`InvalidStatus`; a command the engine would never issue (a claim of a DEAD row, an
outcome for a row nobody ran, anything on a job that left the queue) is dropped
here the way the engine's reads drop it. After every step:

* the model and the row agree on status, attempts, in-flight mark, in-queue-or-not;
* folding the job's events from scratch gives the same row;
* every chain verifies and versions run 1, 2, … with no gap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from jobledger.domain import job_commands, job_outcomes, jobs
from jobledger.domain.chain import verify_chain
from jobledger.domain.errors import InvalidStatus
from jobledger.domain.events import Event
from jobledger.domain.job_outcomes import OutcomePolicy, Result, RunResult
from jobledger.domain.jobs import Change, DeliveryMode, Job, JobStatus, Lane, NewJob, Stamp

GONE = "GONE"  # left the queue (succeeded, skipped, cancelled, expired)
LEASE = timedelta(minutes=5)
DELAYS = (1.0, 2.0, 4.0)


@dataclass
class Model:
    """What a job should be, by the reference's rules, written independently."""

    lane: Lane
    mode: DeliveryMode
    max_attempts: int
    status: str = JobStatus.PENDING.value
    attempts: int = 0
    inflight: bool = False
    lease_until: datetime | None = None

    def leave(self) -> None:
        self.status, self.inflight, self.lease_until = GONE, False, None

    def pending(self) -> None:
        self.status, self.inflight, self.lease_until = JobStatus.PENDING.value, False, None

    def dead(self) -> None:
        self.status, self.inflight, self.lease_until = JobStatus.DEAD.value, False, None


def _ran(m: Model) -> bool:
    """A row some lane ran: RUNNING on the long lane; PENDING on the fast lane, marked in
    flight first when at-most-once."""
    if m.lane == Lane.LONG:
        return m.status == JobStatus.RUNNING.value
    return m.status == JobStatus.PENDING.value and (
        m.inflight or m.mode == DeliveryMode.AT_LEAST_ONCE
    )


class JobMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
        self.models: list[Model] = []
        self.rows: list[Job | None] = []
        self.events: list[list[Event]] = []
        self.tokens = 0

    # --- helpers ---------------------------------------------------------------------------
    def stamp(self) -> Stamp:
        return Stamp(self.now, None, "trace")

    def token(self) -> str:
        self.tokens += 1
        return f"tok{self.tokens}"

    def policy(self, i: int) -> OutcomePolicy:
        m = self.models[i]
        return OutcomePolicy(m.mode, m.max_attempts, DELAYS)

    def write(self, i: int, change: Change) -> None:
        """What the store does: compare-and-set on the version, append, keep the row."""
        row = self.rows[i]
        assert row is not None
        assert change.expected_version == row.stream_version
        assert change.stream == row.stream and change.events
        self.events[i].extend(change.events)
        self.rows[i] = change.row

    def refused(self, i: int, command: object) -> None:
        """The domain must refuse with InvalidStatus and change nothing."""
        before = self.rows[i]
        with pytest.raises(InvalidStatus):
            command()  # type: ignore[operator]
        assert self.rows[i] is before

    def pick(
        self, data: st.DataObject, wanted: Callable[[Model], bool] = lambda m: True
    ) -> int | None:
        """A job still in the queue that `wanted` accepts (the engine's read), or None.

        The engine finds no row for a job that left the queue, so those get no command.
        """
        found = [i for i, m in enumerate(self.models) if m.status != GONE and wanted(m)]
        return data.draw(st.sampled_from(found)) if found else None

    # --- rules -----------------------------------------------------------------------------
    @precondition(lambda self: len(self.models) < 6)
    @rule(
        lane=st.sampled_from(list(Lane)),
        mode=st.sampled_from(list(DeliveryMode)),
        max_attempts=st.integers(1, 4),
    )
    def enqueue(self, lane: Lane, mode: DeliveryMode, max_attempts: int) -> None:
        n = len(self.models)
        change = job_commands.enqueued(
            job_id=f"{n:032x}",
            spec=NewJob("t", {"n": n}, key=f"k{n % 2}"),
            code="c",
            lane=lane,
            partition=n % 4,
            dedupe_key=f"d{n}",
            stamp=self.stamp(),
        )
        assert change.is_new and len(change.events) == 1
        self.models.append(Model(lane, mode, max_attempts))
        self.rows.append(change.row)
        self.events.append(list(change.events))

    @rule(minutes=st.integers(0, 12))
    def advance(self, minutes: int) -> None:
        self.now += timedelta(minutes=minutes, milliseconds=1)

    @rule(data=st.data())
    def dispatch(self, data: st.DataObject) -> None:
        # the fast lane marks only its own rows, once; the domain refuses non-PENDING ones
        i = self.pick(data, lambda m: m.lane == Lane.FAST and not m.inflight)
        if i is None:
            return
        m, row = self.models[i], self.rows[i]
        assert row is not None
        command = lambda: job_commands.dispatch(  # noqa: E731
            row, token=self.token(), pod="p", stamp=self.stamp()
        )
        if m.status != JobStatus.PENDING.value:
            self.refused(i, command)
            return
        self.write(i, command())
        m.inflight = True

    @rule(data=st.data())
    def claim(self, data: st.DataObject) -> None:
        # long-lane candidates are PENDING rows (RUNNING ones go through reclaim)
        i = self.pick(data, lambda m: m.lane == Lane.LONG and m.status == JobStatus.PENDING.value)
        if i is None:
            return
        m, row = self.models[i], self.rows[i]
        assert row is not None
        self.write(
            i,
            job_commands.claim(
                row, token=self.token(), pod="p", lease=LEASE, exclusive=False, stamp=self.stamp()
            ),
        )
        m.status, m.lease_until = JobStatus.RUNNING.value, self.now + LEASE

    @rule(data=st.data())
    def renew(self, data: st.DataObject) -> None:
        i = self.pick(data, lambda m: m.lane == Lane.LONG)
        if i is None:
            return
        m, row = self.models[i], self.rows[i]
        assert row is not None
        command = lambda: job_commands.renew_lease(row, lease=LEASE, stamp=self.stamp())  # noqa: E731
        if m.status != JobStatus.RUNNING.value:
            self.refused(i, command)
            return
        self.write(i, command())
        m.lease_until = self.now + LEASE

    @rule(data=st.data(), result=st.sampled_from(list(Result)), target_up=st.booleans())
    def outcome(self, data: st.DataObject, result: Result, target_up: bool) -> None:
        i = self.pick(data, _ran)  # an outcome is written only for a row that ran
        if i is None:
            return
        m, row = self.models[i], self.rows[i]
        assert row is not None
        decided = job_outcomes.decide_outcome(
            row, RunResult(result, "err", target_up), self.policy(i), self.stamp()
        )
        self.write(i, decided.change)
        if result == Result.OK or result == Result.SKIPPED:
            m.leave()
        elif result == Result.TIMED_OUT and m.mode == DeliveryMode.AT_MOST_ONCE:
            m.attempts += 1  # the run may have had its effect: never sent again
            m.dead()
        elif result == Result.ANSWERED or result == Result.TIMED_OUT:
            m.attempts += 1
            m.dead() if m.attempts >= m.max_attempts else m.pending()
        elif result == Result.DEAD_NOW:
            m.attempts += 1  # the run that went DEAD is one of the runs counted
            m.dead()
        elif result == Result.UNKNOWN and m.mode == DeliveryMode.AT_MOST_ONCE:
            m.attempts += 1
            m.dead()
            assert decided.pause_target == (not target_up)
        else:  # unreachable, or unknown at-least-once: no attempt spent, target paused
            m.pending()
            assert decided.pause_target
        assert decided.dead == (m.status == JobStatus.DEAD.value)

    @rule(data=st.data())
    def take_over(self, data: st.DataObject) -> None:
        i = self.pick(data, lambda m: m.inflight)  # takeover judges only marked rows
        if i is None:
            return
        m, row = self.models[i], self.rows[i]
        assert row is not None
        self.write(i, job_outcomes.take_over(row, m.mode, self.stamp()).change)
        if m.mode == DeliveryMode.AT_MOST_ONCE:
            m.attempts += 1  # the send in flight may have happened: counted as a run
            m.dead()
        else:
            m.pending()

    @rule(data=st.data())
    def reclaim_expired(self, data: st.DataObject) -> None:
        # only RUNNING rows whose lease expired are candidates
        i = self.pick(data, lambda m: m.lease_until is not None and m.lease_until <= self.now)
        if i is None:
            return
        m, row = self.models[i], self.rows[i]
        assert row is not None
        outcome = job_outcomes.reclaim_expired(
            row,
            m.mode,
            token=self.token(),
            pod="q",
            lease=LEASE,
            exclusive=False,
            stamp=self.stamp(),
        )
        self.write(i, outcome.change)
        if m.mode == DeliveryMode.AT_MOST_ONCE:
            m.attempts += 1  # the first run may have finished: counted as a run
            m.dead()
        else:
            m.lease_until = self.now + LEASE

    @rule(
        data=st.data(),
        command=st.sampled_from(["retry", "retry", "skip", "expire", "cancel"]),
    )
    def admin(self, data: st.DataObject, command: str) -> None:
        """Admin and retention commands: the domain alone decides which rows accept them."""
        i = self.pick(data)
        if i is None:
            return
        m, row = self.models[i], self.rows[i]
        assert row is not None
        stamp = self.stamp()
        call = {
            "retry": lambda: job_commands.retry(row, stamp),
            "skip": lambda: job_commands.skip(row, stamp),
            "expire": lambda: job_commands.expire(row, stamp, timedelta(days=30)),
            "cancel": lambda: job_commands.cancel(row, stamp),
        }[command]
        if command == "cancel":
            allowed = m.status == JobStatus.PENDING.value and not m.inflight
        else:
            allowed = m.status == JobStatus.DEAD.value
        if not allowed:
            self.refused(i, call)
            return
        self.write(i, call())
        if command == "retry":
            m.pending()
            m.attempts = 0
        else:
            m.leave()

    # --- invariants ------------------------------------------------------------------------
    @invariant()
    def rows_match_the_model(self) -> None:
        for m, row in zip(self.models, self.rows, strict=True):
            if m.status == GONE:
                assert row is None
                continue
            assert row is not None
            assert row.status.value == m.status
            assert row.attempts == m.attempts
            assert (row.inflight_token is not None) == m.inflight
            assert row.lease_until == (
                m.lease_until if m.status == JobStatus.RUNNING.value else None
            )
            assert (row.claim_token is not None) == (m.status == JobStatus.RUNNING.value)
            assert (row.closed_at is not None) == (m.status == JobStatus.DEAD.value)

    @invariant()
    def folding_the_log_gives_the_row(self) -> None:
        for events, row in zip(self.events, self.rows, strict=True):
            assert jobs.fold(events) == row

    @invariant()
    def chains_verify_and_versions_are_contiguous(self) -> None:
        log = [e for events in self.events for e in events]
        assert verify_chain(log) == []
        for events, row in zip(self.events, self.rows, strict=True):
            assert [e.version for e in events] == list(range(1, len(events) + 1))
            assert len({e.stream for e in events}) == 1
            if row is not None:
                assert row.stream_version == len(events)
                assert row.last_hash == events[-1].hash


JobMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestJobStateMachine = JobMachine.TestCase
