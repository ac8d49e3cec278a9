"""The Kafka target's decisions, with no I/O.

* which `kafka:<topic>` targets exist and in which delivery mode (declared producer
  events plus `KAFKA_TARGET_TOPICS`);
* which topic a job goes to (the per-event override when the job's code is a declared
  producer event, else the target's own topic);
* the record (`jobledger.targets.kafka.record`): key = job key, value = compact JSON
  of the payload, headers `event_id` (the job id, overridden by the job's headers),
  `traceparent` and `trace_id`;
* how a failed send is classified (`classify`) and which handler signal each class
  raises (`signal_for`).

`jobledger.targets.kafka.target` is the thin adapter that carries these out with aiokafka.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import aiokafka.errors as kerr

from jobledger.domain.errors import (
    ConfigError,
    DeadNow,
    TargetOutcomeUnknown,
    TargetUnreachable,
)
from jobledger.domain.jobs import DeliveryMode, Job
from jobledger.targets.kafka.record import InvalidRecord

PREFIX = "kafka:"
TARGET_TOPICS_SETTING = "KAFKA_TARGET_TOPICS"


def target_name(topic: str) -> str:
    return f"{PREFIX}{topic}"


def topic_of(target: str) -> str:
    if not target.startswith(PREFIX):
        raise ValueError(f"{target!r} is not a Kafka target")
    return target[len(PREFIX) :]


# --- which targets exist ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KafkaEvent:
    """A declared producer event: jobs of code `event` go to
    `kafka:<default_topic>`, or to the topic the settings override it with."""

    event: str
    default_topic: str
    delivery_mode: DeliveryMode = DeliveryMode.AT_MOST_ONCE


@dataclass(frozen=True, slots=True)
class TopicTarget:
    """One `kafka:<topic>` target to register, and the mode it ends up in."""

    topic: str
    delivery_mode: DeliveryMode
    declared: bool  # from a KafkaEvent (else only from KAFKA_TARGET_TOPICS)
    switched: bool = False  # a declared topic KAFKA_TARGET_TOPICS moved to at-least-once

    @property
    def name(self) -> str:
        return target_name(self.topic)


def check_topic(topic: str, where: str) -> None:
    """Kafka's legal topic names: 1-249 of [A-Za-z0-9._-], not `.` or `..`.

    The grammar is `jobledger.config.checks`'s (one parser for the setting and the target): a
    legal name parses back to itself as one at-most-once entry.
    """
    from jobledger.config.checks import parse_kafka_target_topics

    try:
        legal = parse_kafka_target_topics(topic) == [(topic, DeliveryMode.AT_MOST_ONCE)]
    except (ValueError, AttributeError):
        legal = False
    if not legal or topic in (".", ".."):
        raise ConfigError(
            f"{where}: {topic!r} is not a Kafka topic name ([A-Za-z0-9._-], 1-249 chars)"
        )


def parse_target_topics(text: str) -> list[tuple[str, DeliveryMode]]:
    """`topic[:at_least_once],…` → (topic, mode) pairs; ConfigError naming the setting.

    Empty items (a trailing comma) are ignored. A topic listed twice with two modes is
    an error: the operator meant one of them.
    """
    from jobledger.config.checks import parse_kafka_target_topics

    try:
        pairs = parse_kafka_target_topics(text)
    except ValueError as exc:
        raise ConfigError(f"{TARGET_TOPICS_SETTING}: {exc}") from None
    modes: dict[str, DeliveryMode] = {}
    for topic, mode in pairs:
        check_topic(topic, TARGET_TOPICS_SETTING)
        if modes.setdefault(topic, mode) != mode:
            raise ConfigError(
                f"{TARGET_TOPICS_SETTING}: topic {topic!r} is listed as both"
                f" {modes[topic].value} and {mode.value}"
            )
    return list(modes.items())


def plan_targets(events: Sequence[KafkaEvent], target_topics: str) -> list[TopicTarget]:
    """Every `kafka:<topic>` target of this pod, declared ones first, in a stable order.

    The setting adds topics and can switch a declared topic to at-least-once. It never
    switches one back: a plain entry for a declared topic changes nothing (turning a
    declared at-least-once topic at-most-once would silently make resends DEAD rows).
    """
    declared: dict[str, DeliveryMode] = {}
    seen_events: set[str] = set()
    for event in events:
        if not event.event:
            raise ConfigError(
                f"a Kafka producer event needs a name (topic {event.default_topic!r})"
            )
        if event.event in seen_events:
            raise ConfigError(f"Kafka producer event {event.event!r} is declared twice")
        seen_events.add(event.event)
        check_topic(event.default_topic, f"Kafka producer event {event.event!r}")
        mode = DeliveryMode(event.delivery_mode)
        if declared.setdefault(event.default_topic, mode) != mode:
            raise ConfigError(
                f"Kafka topic {event.default_topic!r} is declared both"
                f" {declared[event.default_topic].value} and {mode.value}"
            )
    plan = {topic: TopicTarget(topic, mode, True) for topic, mode in declared.items()}
    for topic, mode in parse_target_topics(target_topics):
        known = plan.get(topic)
        if known is None:
            plan[topic] = TopicTarget(topic, mode, False)
        elif mode == DeliveryMode.AT_LEAST_ONCE and known.delivery_mode != mode:
            plan[topic] = TopicTarget(topic, mode, True, switched=True)
    return list(plan.values())


def check_overrides(events: Iterable[KafkaEvent], overrides: Mapping[str, str]) -> dict[str, str]:
    """The per-event topic overrides, validated; an override of an undeclared event is
    an error (it would never be used)."""
    names = {event.event for event in events}
    for event, topic in overrides.items():
        if event not in names:
            raise ConfigError(
                f"kafka_topic_overrides: {event!r} is not a declared Kafka producer event"
                f" (declared: {', '.join(sorted(names)) or 'none'})"
            )
        check_topic(topic, f"kafka_topic_overrides[{event!r}]")
    return dict(overrides)


# --- what a job becomes ------------------------------------------------------------------


def topic_for(job: Job, events: Mapping[str, KafkaEvent], overrides: Mapping[str, str]) -> str:
    """The override when the job's code is a declared producer event, else the target's
    topic."""
    if job.code in events and job.code in overrides:
        return overrides[job.code]
    return topic_of(job.target)


# --- how a failed send ends -------------------------------------------------------------


class Phase(enum.StrEnum):
    """Where the send was when it failed."""

    CONNECT = "connect"  # producer bootstrap: nothing can have been sent
    ENQUEUE = "enqueue"  # metadata wait, serialisation, accumulator: nothing sent yet
    DELIVERY = "delivery"  # the produce request may have left


class KafkaFailure(enum.StrEnum):
    ANSWERED = "answered"  # the broker answered no (or a non-Kafka error): retry path
    NOT_SENT = "not_sent"  # nothing was written: pause, no attempt spent
    UNKNOWN = "unknown"  # failed after a possible append
    TIMED_OUT = "timed_out"  # the broker took the request and did not answer in time
    INVALID = "invalid"  # the client rejected the record: never sendable


#: broker answers that guarantee the record was not written (kafkajs NOT_WRITTEN kinds),
#: and client errors raised before a request could leave
_NOT_WRITTEN: tuple[type[BaseException], ...] = (
    kerr.NodeNotReadyError,
    kerr.NoBrokersAvailable,
    kerr.KafkaUnavailableError,
    kerr.StaleMetadata,
    kerr.MetadataEmptyBrokerList,
    kerr.TooManyInFlightRequests,
    kerr.UnknownTopicOrPartitionError,
    kerr.LeaderNotAvailableError,
    kerr.NotLeaderForPartitionError,
    kerr.BrokerNotAvailableError,
    kerr.ReplicaNotAvailableError,
    kerr.NotEnoughReplicasError,
    kerr.NotControllerError,
    kerr.KafkaStorageError,
    kerr.ProducerClosed,
)

#: a NETWORK_EXCEPTION answer: aiokafka names error code 13 StaleLeaderEpochCodeError
_TIMED_OUT: tuple[type[BaseException], ...] = (
    kerr.RequestTimedOutError,
    kerr.StaleLeaderEpochCodeError,
    kerr.KafkaTimeoutError,
    TimeoutError,
)


def classify(exc: BaseException, phase: Phase = Phase.DELIVERY) -> KafkaFailure:
    """The class of one failed send."""
    if isinstance(exc, InvalidRecord):
        return KafkaFailure.INVALID
    if phase == Phase.CONNECT:
        # bootstrap failed or timed out: no produce request exists yet
        return (
            KafkaFailure.NOT_SENT
            if isinstance(exc, kerr.KafkaError | OSError | TimeoutError)
            else KafkaFailure.ANSWERED
        )
    if phase == Phase.ENQUEUE:
        if isinstance(exc, kerr.MessageSizeTooLargeError | kerr.RecordTooLargeError):
            return KafkaFailure.INVALID  # aiokafka's own size check, before any request
        if isinstance(exc, _NOT_WRITTEN + _TIMED_OUT + (kerr.KafkaConnectionError, OSError)):
            return KafkaFailure.NOT_SENT  # metadata or buffer wait: nothing left the pod
        return KafkaFailure.ANSWERED
    if isinstance(exc, _NOT_WRITTEN):
        return KafkaFailure.NOT_SENT
    if isinstance(exc, _TIMED_OUT):
        return KafkaFailure.TIMED_OUT
    if isinstance(
        exc,
        kerr.KafkaConnectionError
        | kerr.NotEnoughReplicasAfterAppendError
        | kerr.KafkaProtocolError
        | OSError,
    ):
        return KafkaFailure.UNKNOWN  # connection lost with the request out, or appended
    if isinstance(exc, kerr.KafkaError) and exc.retriable:
        return KafkaFailure.UNKNOWN  # any other transient failure once the request left
    return KafkaFailure.ANSWERED


def describe(exc: BaseException) -> str:
    text = str(exc)
    name = type(exc).__name__
    return f"{name}: {text}" if text and name not in text else (text or name)


def signal_for(failure: KafkaFailure, topic: str, exc: BaseException) -> Exception:
    """The exception the handler raises for `failure` (a handler signal the outcome path reads)."""
    message = f"kafka {failure.value} on {topic!r}: {describe(exc)}"
    if failure == KafkaFailure.NOT_SENT:
        return TargetUnreachable(message)
    if failure == KafkaFailure.UNKNOWN:
        return TargetOutcomeUnknown(message)
    if failure == KafkaFailure.TIMED_OUT:
        return TargetOutcomeUnknown(message, target_up=True)
    if failure == KafkaFailure.INVALID:
        return DeadNow(message)
    return KafkaAnswered(message)


class KafkaAnswered(Exception):
    """An answered failure: the broker said no, or a non-Kafka error (retry path)."""


#: exceptions a pure caller may see; used by tests and the docs table
SIGNALS: Mapping[KafkaFailure, type[Exception]] = {
    KafkaFailure.ANSWERED: KafkaAnswered,
    KafkaFailure.NOT_SENT: TargetUnreachable,
    KafkaFailure.UNKNOWN: TargetOutcomeUnknown,
    KafkaFailure.TIMED_OUT: TargetOutcomeUnknown,
    KafkaFailure.INVALID: DeadNow,
}
