"""The Kafka target's pure rules: targets and modes, topic, record, error classes."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from typing import Any

import aiokafka.errors as kerr
import pytest

from jobledger.core.context import RequestContext
from jobledger.core.ids import new_id
from jobledger.domain import job_commands, job_outcomes
from jobledger.domain.errors import ConfigError, DeadNow, TargetOutcomeUnknown, TargetUnreachable
from jobledger.domain.jobs import DeliveryMode, Job, Lane, NewJob, Stamp
from jobledger.targets.kafka.record import InvalidRecord, build_record
from jobledger.targets.kafka.rules import (
    KafkaAnswered,
    KafkaEvent,
    KafkaFailure,
    Phase,
    TopicTarget,
    check_overrides,
    classify,
    parse_target_topics,
    plan_targets,
    signal_for,
    topic_for,
)

AT_MOST = DeliveryMode.AT_MOST_ONCE
AT_LEAST = DeliveryMode.AT_LEAST_ONCE


def make_job(
    target: str = "kafka:orders",
    payload: Any = None,
    *,
    code: str | None = None,
    key: str | None = "DO-1",
    headers: dict[str, str] | None = None,
    trace_id: str | None = "t" * 32,
    traceparent: str | None = None,
) -> Job:
    job_id = new_id()
    change = job_commands.enqueued(
        job_id=job_id,
        spec=NewJob(target, payload, code, key, 0, None, headers),
        code=code or target,
        lane=Lane.FAST,
        partition=0,
        dedupe_key=job_id,
        stamp=Stamp(datetime(2026, 3, 2, tzinfo=UTC), None, trace_id),
        traceparent=traceparent,
    )
    row = change.row
    assert isinstance(row, Job)
    return row


# --- targets and modes -----------------------------------------------------------------


def test_declared_events_register_their_default_topics_in_their_mode() -> None:
    plan = plan_targets(
        [
            KafkaEvent("do_update_oms", "lastmiles.oms.do-update"),
            KafkaEvent("do_update_staffapp", "lastmiles.staffapp.do-update", AT_LEAST),
            KafkaEvent("load_update", "lastmiles.oms.do-update"),  # shares a topic
        ],
        "",
    )
    assert plan == [
        TopicTarget("lastmiles.oms.do-update", AT_MOST, True),
        TopicTarget("lastmiles.staffapp.do-update", AT_LEAST, True),
    ]
    assert plan[0].name == "kafka:lastmiles.oms.do-update"


def test_target_topics_setting_adds_topics_and_switches_a_declared_one() -> None:
    plan = plan_targets(
        [KafkaEvent("e", "declared")],
        " extra , audit:at_least_once,declared:at_least_once,",
    )
    assert plan == [
        TopicTarget("declared", AT_LEAST, True, switched=True),
        TopicTarget("extra", AT_MOST, False),
        TopicTarget("audit", AT_LEAST, False),
    ]


def test_plain_entry_for_a_declared_topic_changes_nothing() -> None:
    plan = plan_targets([KafkaEvent("e", "t", AT_LEAST)], "t")
    assert plan == [TopicTarget("t", AT_LEAST, True)]


@pytest.mark.parametrize(
    "text",
    [
        "orders:at_least_twice",
        ":at_least_once",
        "bad topic",
        "a:b:c",
        "x" * 250,
        "orders,orders:at_least_once",
        "..",
    ],
)
def test_malformed_target_topics_name_the_setting(text: str) -> None:
    with pytest.raises(ConfigError, match="KAFKA_TARGET_TOPICS"):
        plan_targets([], text)


def test_setting_never_switches_a_declared_topic_back_to_at_most_once() -> None:
    plan = plan_targets([KafkaEvent("e", "t", AT_LEAST)], "t:at_most_once")
    assert plan == [TopicTarget("t", AT_LEAST, True)]


def test_bad_declarations_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="declared twice"):
        plan_targets([KafkaEvent("e", "a"), KafkaEvent("e", "b")], "")
    with pytest.raises(ConfigError, match="declared both"):
        plan_targets([KafkaEvent("e", "a"), KafkaEvent("f", "a", AT_LEAST)], "")
    with pytest.raises(ConfigError, match="not a Kafka topic name"):
        plan_targets([KafkaEvent("e", "no spaces")], "")


def test_parse_target_topics_pairs() -> None:
    assert parse_target_topics("a, b:at_least_once") == [("a", AT_MOST), ("b", AT_LEAST)]
    assert parse_target_topics("  ") == []


def test_overrides_must_name_declared_events_and_legal_topics() -> None:
    events = [KafkaEvent("e", "a")]
    assert check_overrides(events, {"e": "b"}) == {"e": "b"}
    with pytest.raises(ConfigError, match="not a declared Kafka producer event"):
        check_overrides(events, {"other": "b"})
    with pytest.raises(ConfigError, match="not a Kafka topic name"):
        check_overrides(events, {"e": "b c"})


# --- topic and record ------------------------------------------------------------------


def test_topic_override_applies_only_to_declared_event_codes() -> None:
    events = {"do_update": KafkaEvent("do_update", "orders")}
    overrides = {"do_update": "orders.v2"}
    assert topic_for(make_job(code="do_update"), events, overrides) == "orders.v2"
    assert topic_for(make_job(code="do_update"), events, {}) == "orders"
    assert topic_for(make_job(code="other"), events, overrides) == "orders"
    assert topic_for(make_job("kafka:audit"), events, overrides) == "audit"


def test_record_key_value_and_headers() -> None:
    job = make_job(payload={"no": "DO-1", "ชื่อ": "ไทย", "n": [1, 2]}, headers={"x-src": "tms"})
    ctx = RequestContext("a" * 32, "00-" + "a" * 32 + "-" + "b" * 16 + "-01", None)
    record = build_record(job, ctx, "orders")
    assert record.topic == "orders"
    assert record.key == b"DO-1"
    # compact JSON, non-ASCII written as UTF-8 (JSON.stringify's bytes)
    assert record.value == '{"no":"DO-1","ชื่อ":"ไทย","n":[1,2]}'.encode()
    assert json.loads(record.value or b"") == job.payload
    assert dict(record.headers) == {
        "event_id": job.id.encode(),
        "x-src": b"tms",
        "traceparent": ctx.traceparent.encode() if ctx.traceparent else b"",
        "trace_id": b"a" * 32,
    }


def test_job_headers_override_event_id_and_job_trace_is_the_fallback() -> None:
    job = make_job(payload=1, headers={"event_id": "evt-7"}, trace_id="c" * 32)
    record = build_record(job, RequestContext(), "t")
    assert record.header("event_id") == b"evt-7"
    assert record.header("trace_id") == b"c" * 32
    assert record.header("traceparent") is None


def test_no_payload_is_a_tombstone_and_needs_a_key() -> None:
    assert build_record(make_job(payload=None), RequestContext(), "t").value is None
    with pytest.raises(Exception, match="needs a key or a value") as info:
        build_record(make_job(payload=None, key=None), RequestContext(), "t")
    assert classify(info.value, Phase.ENQUEUE) == KafkaFailure.INVALID


def test_unserialisable_payload_is_invalid() -> None:
    job = dataclasses.replace(make_job(payload=1), payload={"x": {1, 2}})
    with pytest.raises(InvalidRecord, match="not JSON") as info:
        build_record(job, RequestContext(), "t")
    assert classify(info.value) == KafkaFailure.INVALID


# --- error classes, on real aiokafka exception instances ----------------------------------

CASES: list[tuple[BaseException, Phase, KafkaFailure]] = [
    # connect phase: nothing was sent
    (
        kerr.KafkaConnectionError("Unable to bootstrap from [('127.0.0.1', 1)]"),
        Phase.CONNECT,
        KafkaFailure.NOT_SENT,
    ),
    (ConnectionRefusedError(111, "refused"), Phase.CONNECT, KafkaFailure.NOT_SENT),
    (TimeoutError(), Phase.CONNECT, KafkaFailure.NOT_SENT),
    (ValueError("bad config"), Phase.CONNECT, KafkaFailure.ANSWERED),
    # enqueue phase: metadata / buffer wait, client-side checks
    (kerr.UnknownTopicOrPartitionError(), Phase.ENQUEUE, KafkaFailure.NOT_SENT),
    (
        kerr.KafkaTimeoutError("Failed to update metadata after 3.0 secs."),
        Phase.ENQUEUE,
        KafkaFailure.NOT_SENT,
    ),
    (TimeoutError(), Phase.ENQUEUE, KafkaFailure.NOT_SENT),
    (kerr.ProducerClosed(), Phase.ENQUEUE, KafkaFailure.NOT_SENT),
    (
        kerr.MessageSizeTooLargeError("The message is 2000089 bytes"),
        Phase.ENQUEUE,
        KafkaFailure.INVALID,
    ),
    (kerr.TopicAuthorizationFailedError("orders"), Phase.ENQUEUE, KafkaFailure.ANSWERED),
    (AssertionError("Need at least one: key or value"), Phase.ENQUEUE, KafkaFailure.ANSWERED),
    # delivery phase: the request may have left
    (
        kerr.NodeNotReadyError("Attempt to send a request to node which is not ready"),
        Phase.DELIVERY,
        KafkaFailure.NOT_SENT,
    ),
    (kerr.NotLeaderForPartitionError(), Phase.DELIVERY, KafkaFailure.NOT_SENT),
    (kerr.LeaderNotAvailableError(), Phase.DELIVERY, KafkaFailure.NOT_SENT),
    (kerr.NotEnoughReplicasError(), Phase.DELIVERY, KafkaFailure.NOT_SENT),
    (kerr.UnknownTopicOrPartitionError(), Phase.DELIVERY, KafkaFailure.NOT_SENT),
    (
        kerr.KafkaConnectionError("Connection at 127.0.0.1:9092 closed"),
        Phase.DELIVERY,
        KafkaFailure.UNKNOWN,
    ),
    (kerr.NotEnoughReplicasAfterAppendError(), Phase.DELIVERY, KafkaFailure.UNKNOWN),
    (kerr.CorrelationIdError(), Phase.DELIVERY, KafkaFailure.UNKNOWN),
    (kerr.RequestTimedOutError(), Phase.DELIVERY, KafkaFailure.TIMED_OUT),
    (kerr.for_code(13)(), Phase.DELIVERY, KafkaFailure.TIMED_OUT),  # NETWORK_EXCEPTION
    (kerr.KafkaTimeoutError(), Phase.DELIVERY, KafkaFailure.TIMED_OUT),
    (kerr.InvalidTopicError(), Phase.DELIVERY, KafkaFailure.ANSWERED),
    (kerr.CorruptRecordException(), Phase.DELIVERY, KafkaFailure.ANSWERED),
    (kerr.MessageSizeTooLargeError(), Phase.DELIVERY, KafkaFailure.ANSWERED),  # broker said so
    (kerr.TopicAuthorizationFailedError("orders"), Phase.DELIVERY, KafkaFailure.ANSWERED),
    (RuntimeError("boom"), Phase.DELIVERY, KafkaFailure.ANSWERED),
]


@pytest.mark.parametrize(
    ("exc", "phase", "expected"), CASES, ids=[f"{p.value}-{type(e).__name__}" for e, p, _ in CASES]
)
def test_classify(exc: BaseException, phase: Phase, expected: KafkaFailure) -> None:
    assert classify(exc, phase) == expected


def test_classify_defaults_to_the_delivery_phase() -> None:
    assert classify(kerr.RequestTimedOutError()) == KafkaFailure.TIMED_OUT


def test_each_class_maps_to_its_handler_signal() -> None:
    cause = kerr.RequestTimedOutError()
    answered = signal_for(KafkaFailure.ANSWERED, "t", cause)
    assert type(answered) is KafkaAnswered
    assert not getattr(answered, "dead_now", False)
    assert isinstance(signal_for(KafkaFailure.NOT_SENT, "t", cause), TargetUnreachable)
    unknown = signal_for(KafkaFailure.UNKNOWN, "t", cause)
    assert isinstance(unknown, TargetOutcomeUnknown) and unknown.target_up is False
    timed_out = signal_for(KafkaFailure.TIMED_OUT, "t", cause)
    assert isinstance(timed_out, TargetOutcomeUnknown) and timed_out.target_up is True
    invalid = signal_for(KafkaFailure.INVALID, "t", cause)
    assert isinstance(invalid, DeadNow) and invalid.dead_now is True
    assert "kafka timed_out on 't'" in str(timed_out)
    assert "RequestTimedOutError" in str(timed_out)


def test_signals_drive_the_outcome_path_as_the_reference_says() -> None:
    """The handler signals, read by the shared outcome path, give the reference engine's outcomes."""
    from jobledger.domain.job_outcomes import OutcomePolicy, RunResult
    from jobledger.domain.job_outcomes import Result as R

    job = make_job(payload=1)
    stamp = Stamp(datetime(2026, 3, 2, 9, tzinfo=UTC))

    def decide(failure: KafkaFailure, mode: DeliveryMode) -> job_outcomes.Outcome:
        exc = signal_for(failure, "t", kerr.RequestTimedOutError())
        result = {
            TargetUnreachable: R.UNREACHABLE,
            TargetOutcomeUnknown: R.UNKNOWN,
            DeadNow: R.DEAD_NOW,
            KafkaAnswered: R.ANSWERED,
        }[type(exc)]
        run = RunResult(result, str(exc), getattr(exc, "target_up", False))
        return job_outcomes.decide_outcome(
            job, run, OutcomePolicy(mode, 6, (1, 2, 4, 8, 16)), stamp
        )

    assert decide(KafkaFailure.NOT_SENT, AT_MOST).label == "deferred"
    timed_out = decide(KafkaFailure.TIMED_OUT, AT_MOST)
    assert timed_out.dead and not timed_out.pause_target  # DEAD, target not paused
    unknown = decide(KafkaFailure.UNKNOWN, AT_MOST)
    assert unknown.dead and unknown.pause_target
    kept = decide(KafkaFailure.TIMED_OUT, AT_LEAST)
    assert kept.label == "deferred" and kept.pause_target  # kept, attempts 0, paused
    assert decide(KafkaFailure.INVALID, AT_LEAST).dead
    assert decide(KafkaFailure.ANSWERED, AT_MOST).label == "failed"
