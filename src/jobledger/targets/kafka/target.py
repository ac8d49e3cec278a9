"""The Kafka target: `kafka:<topic>` fast-lane targets sent through one producer per pod.

    target = install_kafka(engine, [KafkaEvent("do_update_oms", "lastmiles.oms.do-update")],
                           bootstrap="kafka-1:9092")
    await target.start()          # the runtime calls start/stop
    ...
    await target.stop()

The decisions (targets and modes, topic, record, error classes) are pure and live in
`jobledger.targets.kafka.rules`; this module only owns the aiokafka producer:

* one long-lived `AIOKafkaProducer` per pod, created lazily and created again after a
  failure that may have left it with a dead connection or stale metadata;
* acks=all, no idempotent producer (aiokafka's cannot start against brokers with only
  InitProducerId v0, such as tansu 0.6);
* client retries off. aiokafka has no `retries` setting: it resends a retriable
  failure until the batch is older than its delivery timeout, which it takes from
  `request_timeout_ms`. A resend after a lost connection can duplicate a record and
  hides how the first try ended, so the producer's batch time-to-live is set to 0 —
  every batch fails with its first error (`_disable_client_retries`);
* connect timeout 3 s (bootstrap, and the metadata/buffer wait before a record is
  queued), request timeout 10 s: one send is capped well under the 30 s partition lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from aiokafka import AIOKafkaProducer
from aiokafka.errors import ProducerClosed
from aiokafka.partitioner import DefaultPartitioner, murmur2

from jobledger.core import context
from jobledger.domain.errors import ConfigError, DeadNow, TargetUnreachable
from jobledger.domain.jobs import DeliveryMode, Job, Lane
from jobledger.targets.kafka.append import Appender
from jobledger.targets.kafka.record import InvalidRecord, Record, record_parts
from jobledger.targets.kafka.rules import (
    KafkaEvent,
    KafkaFailure,
    Phase,
    check_overrides,
    classify,
    plan_targets,
    signal_for,
    topic_for,
)

if TYPE_CHECKING:
    from jobledger.engine import Engine

logger = logging.getLogger("jobledger.kafka")

T = TypeVar("T")

__all__ = ["KafkaEvent", "KafkaTarget", "ProducerOptions", "SendFailed", "install_kafka"]


@dataclass(frozen=True, slots=True)
class ProducerOptions:
    bootstrap: str
    connect_timeout_s: float = 3.0
    request_timeout_s: float = 10.0
    max_request_size: int = 1_048_576
    linger_ms: int = 0
    max_batch_size: int = 262_144
    client_id: str = "jobledger"


class SendFailed(Exception):
    """A send that failed in `phase` (the adapter's wrapper around aiokafka's error)."""

    def __init__(self, phase: Phase, cause: BaseException) -> None:
        super().__init__(f"{phase.value}: {cause!r}")
        self.phase = phase
        self.cause = cause

    @property
    def failure(self) -> KafkaFailure:
        return classify(self.cause, self.phase)


def _disable_client_retries(producer: Any) -> None:
    """Make every batch fail with its first error instead of being resent.

    aiokafka resends a batch that failed with a retriable error while the batch is
    younger than its time-to-live (`request_timeout_ms`), and offers no setting to
    turn that off. A TTL of 0 means: never resend. Checked loudly, so an aiokafka
    release that renames the attribute fails at start instead of silently retrying.
    """
    accumulator = getattr(producer, "_message_accumulator", None)
    if accumulator is None or not hasattr(accumulator, "_batch_ttl"):
        raise RuntimeError(
            "this aiokafka version has no MessageAccumulator._batch_ttl: the Kafka target"
            " cannot turn client retries off (tested with aiokafka 0.12-0.14)"
        )
    accumulator._batch_ttl = 0


async def bounded_if_it_waits(awaitable: Awaitable[T], timeout_s: float) -> T:
    """`await awaitable`, timed out after `timeout_s` if it has to wait.

    aiokafka's `send` usually queues the record without waiting (the topic's metadata is
    known, its batch has room), and a timer per send was the largest cost of the target's
    own. So its first step runs bare, and only if it suspends does the rest run under
    `asyncio.timeout`, which then covers every wait of the send.
    """
    steps = awaitable.__await__()
    try:
        waiting_on = steps.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    async with asyncio.timeout(timeout_s):
        return await _Resumed(steps, waiting_on)


class _Resumed(Generic[T]):
    """The rest of a coroutine stepped by hand and suspended on `waiting_on`: awaiting it
    hands `waiting_on` to the task, then runs the coroutine on as `yield from` would (the
    task's wake-up is sent in, a cancellation thrown in)."""

    def __init__(self, steps: Generator[Any, Any, T], waiting_on: Any) -> None:
        self.steps = steps
        self.waiting_on = waiting_on

    def __await__(self) -> Generator[Any, Any, T]:
        steps, waiting_on = self.steps, self.waiting_on
        while True:
            try:
                try:
                    sent = yield waiting_on
                except GeneratorExit:  # closed while suspended: close the coroutine too
                    steps.close()
                    raise
                except BaseException as exc:  # the timeout's (or the lane's) cancellation
                    waiting_on = steps.throw(exc)
                else:
                    waiting_on = steps.send(sent)
            except StopIteration as done:
                result: T = done.value
                return result


class KafkaTarget:
    """The handler of every `kafka:<topic>` target of a pod, and its producer."""

    def __init__(
        self,
        options: ProducerOptions | None,
        *,
        events: Sequence[KafkaEvent] = (),
        topic_overrides: Mapping[str, str] | None = None,
        enabled: bool = True,
    ) -> None:
        if enabled and (options is None or not options.bootstrap):
            raise ConfigError(
                "kafka_bootstrap: Kafka is enabled but no bootstrap servers are set"
                " (JOBLEDGER_KAFKA_BOOTSTRAP), or set kafka_enabled off"
            )
        self.options = options
        self.enabled = enabled
        self.events = {event.event: event for event in events}
        self.topic_overrides = check_overrides(events, topic_overrides or {})
        self._producer: Any = None
        self._topics: dict[str, str] = {}  # target name → topic (`topic_for` without overrides)
        self._appender: Appender | None = None  # the no-wait path of `_producer`'s send
        self._lock = asyncio.Lock()
        self._closing: set[asyncio.Task[None]] = set()
        self._stopped = False
        #: called with (job, RecordMetadata) once the broker acknowledged a job's record,
        #: before the handler returns; None (the default) costs one attribute test per
        #: send. For test harnesses only (tests/chaos/app.py logs every ack with it).
        self.on_ack: Callable[[Job, Any], None] | None = None

    # --- life cycle ----------------------------------------------------------------------
    async def start(self) -> None:
        """Warm the producer up; a broker that is down now is not an error (the rows wait
        paused until it is back)."""
        self._stopped = False
        if not self.enabled:
            logger.info("kafka disabled: kafka targets stay paused, nothing is sent")
            return
        try:
            await self._ready_producer()
        except SendFailed as exc:
            logger.warning("kafka not reachable at start (%s); sends will retry", exc.cause)

    async def stop(self) -> None:
        """Flush and close the producer, and any discarded one still closing."""
        self._stopped = True
        async with self._lock:
            producer, self._producer = self._producer, None
            self._appender = None
        if producer is not None:
            await producer.stop()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    # --- the handler ---------------------------------------------------------------------
    async def __call__(self, job: Job) -> None:
        """Send `job`; raise the handler signal of its failure class."""
        if not self.enabled:
            raise TargetUnreachable("kafka is disabled (kafka_enabled=off): nothing sent")
        overrides = self.topic_overrides
        # no overrides: the topic is the target's own, remembered per target name
        topic = None if overrides else self._topics.get(job.target)
        if topic is None:
            topic = topic_for(job, self.events, overrides)
            if not overrides and len(self._topics) < 4096:
                self._topics[job.target] = topic
        try:
            key, value, headers = record_parts(job, context.current())
        except InvalidRecord as exc:
            raise DeadNow(f"kafka invalid record for {topic!r}: {exc}") from exc
        appender = self._appender
        # the common case without `send`'s coroutine: metadata known, the batch has room
        queued = (
            None
            if appender is None or self._stopped
            else appender.append(topic, key, value, headers)
        )
        if appender is None or queued is None:
            try:
                acked = await self.send(Record(topic, key, value, tuple(headers)))
            except SendFailed as failed:
                raise signal_for(failed.failure, topic, failed.cause) from failed.cause
        else:
            try:
                acked = await queued  # `_delivered` inline: no coroutine per record
            except Exception as exc:
                failure = classify(exc, Phase.DELIVERY)
                self._after_failure(appender.producer, failure)
                raise signal_for(failure, topic, exc) from exc
        if self.on_ack is not None:
            self.on_ack(job, acked)

    async def send(self, record: Record) -> Any:
        """One record, one try; returns aiokafka's RecordMetadata or raises SendFailed."""
        if self._stopped:
            # nothing sent: the row waits (TargetUnreachable), no attempt spent — a lane
            # still running while the pod shuts down must not burn retries
            raise SendFailed(Phase.CONNECT, ProducerClosed("the kafka target is stopped"))
        producer = self._producer or await self._ready_producer()
        assert self.options is not None
        try:
            # the metadata and buffer wait is bounded like a connect: nothing has left yet
            delivery = await bounded_if_it_waits(
                producer.send(
                    record.topic, record.value, key=record.key, headers=list(record.headers)
                ),
                self.options.connect_timeout_s,
            )
        except Exception as exc:
            self._after_failure(producer, classify(exc, Phase.ENQUEUE))
            raise SendFailed(Phase.ENQUEUE, exc) from exc
        return await self._delivered(producer, delivery)

    async def _delivered(self, producer: Any, delivery: Awaitable[Any]) -> Any:
        """The broker's answer to a queued record (RecordMetadata), or SendFailed."""
        try:
            return await delivery
        except Exception as exc:
            self._after_failure(producer, classify(exc, Phase.DELIVERY))
            raise SendFailed(Phase.DELIVERY, exc) from exc

    # --- the producer --------------------------------------------------------------------
    def _new_producer(self) -> Any:
        assert self.options is not None
        producer = AIOKafkaProducer(
            bootstrap_servers=self.options.bootstrap,
            client_id=self.options.client_id,
            acks="all",
            enable_idempotence=False,
            request_timeout_ms=int(self.options.request_timeout_s * 1000),
            max_request_size=self.options.max_request_size,
            linger_ms=self.options.linger_ms,
            max_batch_size=self.options.max_batch_size,
            partitioner=partition_of,
        )
        _disable_client_retries(producer)
        return producer

    async def _ready_producer(self) -> Any:
        async with self._lock:
            if self._producer is not None:
                return self._producer
            assert self.options is not None
            producer = self._new_producer()
            try:
                await asyncio.wait_for(producer.start(), self.options.connect_timeout_s)
            except Exception as exc:
                await self._close_quietly(producer)
                raise SendFailed(Phase.CONNECT, exc) from exc
            self._producer = producer
            self._appender = Appender.for_producer(producer, partition_of, _key_hash)
            return producer

    def _after_failure(self, producer: Any, failure: KafkaFailure) -> None:
        """Drop the producer after a transport failure: the next send builds a new one
        (fresh connections and metadata). Its other records still finish while it closes."""
        if failure in (KafkaFailure.ANSWERED, KafkaFailure.INVALID):
            return
        if self._producer is producer:
            self._producer = None
            self._appender = None
            task = asyncio.get_running_loop().create_task(self._close_quietly(producer))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    @staticmethod
    async def _close_quietly(producer: Any) -> None:
        with contextlib.suppress(Exception):
            await producer.stop()


@functools.lru_cache(maxsize=65_536)
def _key_hash(key: bytes) -> int:
    return int(murmur2(key)) & 0x7FFFFFFF


def partition_of(key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
    """aiokafka's `DefaultPartitioner` (the Java client's murmur2 of the key, so a key
    lands where any Kafka client puts it), the hash of a key remembered: every version of
    a key hashes the same bytes, and aiokafka's murmur2 is pure Python."""
    if key is None:
        return int(DefaultPartitioner()(key, all_partitions, available))
    return all_partitions[_key_hash(key) % len(all_partitions)]


def install_kafka(
    engine: Engine,
    events: Sequence[KafkaEvent],
    *,
    bootstrap: str | None,
    topic_overrides: Mapping[str, str] | None = None,
    connect_timeout_s: float | None = None,
    request_timeout_s: float | None = None,
    max_request_size: int = 1_048_576,
) -> KafkaTarget:
    """Register the `kafka:<topic>` fast-lane targets on `engine` and return their handler.

    Targets: one per declared producer event's default topic (in its delivery mode), plus
    `settings.kafka_target_topics` (KAFKA_TARGET_TOPICS), which may also switch a declared
    topic to at-least-once. Overrides: `topic_overrides`, else
    `settings.kafka_topic_overrides`. `bootstrap` None → `settings.kafka_bootstrap`.
    """
    settings = engine.settings
    plan = plan_targets(events, settings.kafka_target_topics)
    servers = bootstrap or settings.kafka_bootstrap
    options = None
    if servers:
        options = ProducerOptions(
            servers,
            connect_timeout_s=connect_timeout_s or settings.kafka_connect_timeout_s,
            request_timeout_s=request_timeout_s or settings.kafka_request_timeout_s,
            max_request_size=max_request_size,
        )
    overrides = topic_overrides if topic_overrides is not None else settings.kafka_topic_overrides
    target = KafkaTarget(
        options, events=events, topic_overrides=overrides, enabled=settings.kafka_enabled
    )
    for item in plan:
        declared_mode = DeliveryMode.AT_MOST_ONCE if item.switched else item.delivery_mode
        engine.targets.register(item.name, Lane.FAST, target, delivery_mode=declared_mode)
        if item.switched:  # KAFKA_TARGET_TOPICS `topic:at_least_once` on a declared topic
            engine.targets.replace_delivery_mode(item.name, item.delivery_mode)
            logger.info("kafka target %s switched to %s", item.name, item.delivery_mode.value)
    return target
