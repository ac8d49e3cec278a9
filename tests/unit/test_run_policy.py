"""A target's retry and timeout policy, pure (domain/run_policy.py): the delays, the
jitter's bounds and determinism, what is refused, and the outcome each policy leads to."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobledger.domain import job_outcomes
from jobledger.domain.errors import InvalidArgument
from jobledger.domain.job_outcomes import OutcomeLabel, OutcomePolicy, Result, RunResult
from jobledger.domain.jobs import DeliveryMode, JobStatus, Lane, Stamp
from jobledger.domain.run_policy import (
    MAX_DELAY_S,
    Backoff,
    RetryDelays,
    check_timeout,
    jitter_share,
    lease_room_s,
    retry_policy,
    timeout_refusal,
)
from tests.builders import T0, a_job

NOW = T0 + timedelta(hours=1)


def test_a_list_of_delays_in_seconds_or_timedeltas() -> None:
    policy = retry_policy("t", [5, timedelta(seconds=10), 2.5])
    assert policy == RetryDelays((5.0, 10.0, 2.5))
    assert policy.attempts == 4  # the first run and one after each delay
    waits = [policy.delay(n, "job") for n in (1, 2, 3)]
    assert waits == [timedelta(seconds=5), timedelta(seconds=10), timedelta(seconds=2.5)]
    assert policy.delay(9, "job") == timedelta(seconds=2.5)  # the last one repeats
    assert retry_policy("t", (1,)) == RetryDelays((1.0,))  # a tuple too


def test_the_default_table_in_minutes() -> None:
    policy = RetryDelays.of_minutes((1, 2, 4, 8, 16))
    assert [policy.delay(n, "j") / timedelta(minutes=1) for n in range(1, 7)] == [
        1,
        2,
        4,
        8,
        16,
        16,
    ]
    assert policy.attempts == 6


def test_backoff_grows_by_its_factor_up_to_its_max() -> None:
    policy = Backoff(base_s=2, factor=3, max_s=60)
    assert [policy.delay(n, "j").total_seconds() for n in range(1, 6)] == [2, 6, 18, 54, 60]
    assert policy.delay(10_000, "j") == timedelta(seconds=60)  # no overflow far out
    assert Backoff(base_s=5, factor=1, max_s=5).delay(3, "j") == timedelta(seconds=5)
    assert Backoff(base_s=0, max_s=0).delay(3, "j") == timedelta(0)
    assert Backoff(base_s=0.3, factor=3).delay(2, "j") == timedelta(milliseconds=900)
    given = Backoff(base_s=timedelta(seconds=2), max_s=timedelta(minutes=1))  # type: ignore[arg-type]
    assert given == Backoff(base_s=2, max_s=60)


def test_jitter_takes_off_a_share_fixed_by_the_job_and_the_failure() -> None:
    policy = Backoff(base_s=100, factor=2, max_s=1000, jitter=0.5)
    first = policy.delay(1, "job-a")
    assert first == policy.delay(1, "job-a")  # the same on every pod and every replay
    assert timedelta(seconds=50) <= first <= timedelta(seconds=100)
    spread = {policy.delay(1, f"job-{i}") for i in range(50)}
    assert len(spread) > 40  # jobs that failed together come back apart
    share = jitter_share("job-a", 1)
    assert first == timedelta(milliseconds=round(100_000 * (1 - 0.5 * share)))


@given(
    base=st.just(0.0) | st.floats(0.001, 1000),
    factor=st.floats(1, 10),
    extra=st.floats(0, 10_000),
    jitter=st.floats(0, 1),
    failures=st.integers(-3, 2_000),
    job_id=st.text(max_size=30),
)
def test_backoff_is_never_negative_nor_above_its_max(
    base: float, factor: float, extra: float, jitter: float, failures: int, job_id: str
) -> None:
    policy = Backoff(
        base_s=base, factor=factor, max_s=min(base + extra, MAX_DELAY_S), jitter=jitter
    )
    wait = policy.delay(failures, job_id)
    assert timedelta(0) <= wait <= timedelta(seconds=policy.max_s)
    assert wait.microseconds % 1000 == 0  # whole milliseconds, as every store keeps


@pytest.mark.parametrize(
    ("retry", "words"),
    [
        ([], "retry needs at least one delay"),
        ([5, -1], "between 0 and"),
        ([timedelta(seconds=-1)], "between 0 and"),
        ([float("nan")], "between 0 and"),
        ([MAX_DELAY_S + 1], "between 0 and"),
        (["5"], "seconds or a timedelta, not str"),
        ([True], "seconds or a timedelta, not bool"),
        ("5,10", "a list of delays or a Backoff, not str"),
        (5, "a list of delays or a Backoff, not int"),
        ({"base_s": 1}, "not dict"),
    ],
)
def test_bad_retry_values_are_refused_in_one_line(retry: object, words: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        retry_policy("mail:x", retry)
    assert "mail:x" in caught.value.message and words in caught.value.message
    assert "\n" not in caught.value.message


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"base_s": -1}, "base_s must be between 0"),
        ({"base_s": 1e-5}, "base_s must be 0 or at least 0.001 s"),
        ({"base_s": 10, "max_s": 5}, "max_s (5) must not be below base_s (10)"),
        ({"base_s": 1, "factor": 0.5}, "factor must be a number from 1"),
        ({"base_s": 1, "jitter": 1.5}, "jitter must be a share from 0 to 1"),
        ({"base_s": 1, "jitter": -0.1}, "jitter must be a share"),
        ({"base_s": 1, "attempts": 0}, "attempts must be at least 1"),
        ({"base_s": 1, "attempts": 2.0}, "attempts must be at least 1"),
        ({"base_s": "1"}, "base_s must be seconds"),
    ],
)
def test_a_bad_backoff_is_refused_when_built(options: dict[str, object], words: str) -> None:
    with pytest.raises(InvalidArgument, match=r"^Backoff ") as caught:
        Backoff(**options)  # type: ignore[arg-type]
    assert words in caught.value.message and "\n" not in caught.value.message


def test_timeouts_are_positive_seconds() -> None:
    assert check_timeout("t", None) is None
    assert check_timeout("t", 2) == 2.0
    assert check_timeout("t", timedelta(milliseconds=1500)) == 1.5
    for bad in (0, -1, float("inf"), "3", True):
        with pytest.raises(InvalidArgument, match=r"^target 't': timeout_s must be a positive"):
            check_timeout("t", bad)


def test_a_timeout_must_end_before_the_lease_a_run_may_start_with() -> None:
    # fast lane: a send starts only while a quarter of the partition lease is left
    assert lease_room_s(Lane.FAST, 30, 300) == 7.5
    assert lease_room_s(Lane.LONG, 30, 300) == 300
    assert timeout_refusal("kafka:t", Lane.FAST, 7.4, 30, 300) is None
    assert timeout_refusal("report", Lane.LONG, 299, 30, 300) is None
    fast = timeout_refusal("kafka:t", Lane.FAST, 7.5, 30, 300)
    assert fast == (
        "target 'kafka:t': timeout_s=7.5 cannot finish within the 7.5 s a fast-lane send"
        " may start with (partition_lease_s=30 * 0.25); shorten the timeout or lengthen"
        " the lease"
    )
    long = timeout_refusal("report", Lane.LONG, 600, 30, 300)
    assert long is not None and "timeout_s=600" in long and "long_lease_s=300" in long


# --- what decide_outcome makes of them ----------------------------------------------


def _failed(result: Result, policy: OutcomePolicy, attempts: int = 0) -> job_outcomes.Outcome:
    job = dataclasses.replace(a_job(), attempts=attempts)
    run = RunResult(result, error="boom")
    return job_outcomes.decide_outcome(job, run, policy, Stamp(NOW))


def test_a_target_policy_sets_the_next_run() -> None:
    policy = OutcomePolicy(DeliveryMode.AT_LEAST_ONCE, 3, (1,), RetryDelays((5.0, 10.0)))
    outcome = _failed(Result.ANSWERED, policy, attempts=1)
    row = outcome.change.row
    assert outcome.label is OutcomeLabel.FAILED
    assert row.next_run_at == NOW + timedelta(seconds=10)  # type: ignore[union-attr]
    assert _failed(Result.ANSWERED, policy, attempts=2).label is OutcomeLabel.DEAD


def test_without_a_target_policy_the_settings_table_applies() -> None:
    policy = OutcomePolicy(DeliveryMode.AT_LEAST_ONCE, 6, (1, 2, 4, 8, 16))
    row = _failed(Result.ANSWERED, policy, attempts=2).change.row
    assert row.next_run_at == NOW + timedelta(minutes=4)  # type: ignore[union-attr]


def test_a_timed_out_run_is_a_failed_attempt_at_least_once() -> None:
    policy = OutcomePolicy(DeliveryMode.AT_LEAST_ONCE, 6, (1,), RetryDelays((5.0,)))
    outcome = _failed(Result.TIMED_OUT, policy)
    assert outcome.label is OutcomeLabel.FAILED and not outcome.pause_target
    assert outcome.change.row.attempts == 1  # type: ignore[union-attr]


def test_a_timed_out_run_is_dead_at_most_once() -> None:
    """The cancelled run may have had its effect: sending it again could deliver twice."""
    policy = OutcomePolicy(DeliveryMode.AT_MOST_ONCE, 6, (1,))
    outcome = _failed(Result.TIMED_OUT, policy)
    assert outcome.label is OutcomeLabel.DEAD and not outcome.pause_target
    row = outcome.change.row
    assert row.status == JobStatus.DEAD and row.dead_reason == "timeout"  # type: ignore[union-attr]
    assert row.attempts == 1  # type: ignore[union-attr]
