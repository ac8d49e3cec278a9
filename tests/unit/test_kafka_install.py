"""install_kafka: which targets a pod registers, their lane and delivery mode (no broker)."""

from __future__ import annotations

import pytest

from jobledger.config.settings import Settings
from jobledger.domain.errors import ConfigError, DuplicateTarget
from jobledger.domain.jobs import DeliveryMode, Lane
from jobledger.engine import Engine
from jobledger.storage.memory import MemoryStore
from jobledger.targets.kafka.rules import KafkaEvent
from jobledger.targets.kafka.target import install_kafka

EVENTS = [
    KafkaEvent("do_update_oms", "lastmiles.oms.do-update"),
    KafkaEvent("do_update_staffapp", "lastmiles.staffapp.do-update"),
    KafkaEvent("audit_event", "audit", DeliveryMode.AT_LEAST_ONCE),
]


def engine(**settings: object) -> Engine:
    return Engine(MemoryStore(), settings=Settings(**settings))  # type: ignore[arg-type]


def test_declared_events_become_fast_lane_targets_in_their_mode() -> None:
    eng = engine()
    target = install_kafka(eng, EVENTS, bootstrap="127.0.0.1:9092")
    assert eng.targets.names() == [
        "kafka:audit",
        "kafka:lastmiles.oms.do-update",
        "kafka:lastmiles.staffapp.do-update",
    ]
    for name in eng.targets.names():
        registered = eng.targets.get(name)
        assert registered.lane == Lane.FAST
        assert registered.handler is target
    assert (
        eng.targets.get("kafka:lastmiles.oms.do-update").delivery_mode == DeliveryMode.AT_MOST_ONCE
    )
    assert eng.targets.get("kafka:audit").delivery_mode == DeliveryMode.AT_LEAST_ONCE


def test_target_topics_setting_adds_targets_and_switches_a_declared_one() -> None:
    eng = engine(
        kafka_target_topics="lastmiles.oms.do-update:at_least_once, adhoc ,adhoc.safe:at_least_once"
    )
    install_kafka(eng, EVENTS, bootstrap="127.0.0.1:9092")
    modes = {name: eng.targets.get(name).delivery_mode for name in eng.targets.names()}
    assert modes == {
        "kafka:lastmiles.oms.do-update": DeliveryMode.AT_LEAST_ONCE,  # switched
        "kafka:lastmiles.staffapp.do-update": DeliveryMode.AT_MOST_ONCE,
        "kafka:audit": DeliveryMode.AT_LEAST_ONCE,
        "kafka:adhoc": DeliveryMode.AT_MOST_ONCE,
        "kafka:adhoc.safe": DeliveryMode.AT_LEAST_ONCE,
    }


@pytest.mark.parametrize("text", ["orders:exactly_once", "a b", "a:at_least_once:x"])
def test_malformed_target_topics_refuse_to_install(text: str) -> None:
    eng = engine(kafka_target_topics=text)
    with pytest.raises(ConfigError, match="KAFKA_TARGET_TOPICS"):
        install_kafka(eng, EVENTS, bootstrap="127.0.0.1:9092")
    assert eng.targets.names() == []  # validated before anything is registered


def test_overrides_come_from_the_argument_or_the_settings() -> None:
    eng = engine(kafka_topic_overrides={"do_update_oms": "oms.v2"})
    assert install_kafka(eng, EVENTS, bootstrap="h:1").topic_overrides == {
        "do_update_oms": "oms.v2"
    }
    eng = engine(kafka_topic_overrides={"do_update_oms": "oms.v2"})
    target = install_kafka(eng, EVENTS, bootstrap="h:1", topic_overrides={"audit_event": "a2"})
    assert target.topic_overrides == {"audit_event": "a2"}
    with pytest.raises(ConfigError, match="not a declared Kafka producer event"):
        install_kafka(engine(), EVENTS, bootstrap="h:1", topic_overrides={"nope": "x"})


def test_bootstrap_and_timeouts_default_to_the_settings() -> None:
    eng = engine(
        kafka_bootstrap="k1:9092,k2:9092", kafka_connect_timeout_s=2.0, kafka_request_timeout_s=7.0
    )
    target = install_kafka(eng, EVENTS, bootstrap=None)
    assert target.options is not None
    assert target.options.bootstrap == "k1:9092,k2:9092"
    assert (target.options.connect_timeout_s, target.options.request_timeout_s) == (2.0, 7.0)
    default = install_kafka(engine(), EVENTS, bootstrap="h:1").options
    assert default is not None
    assert (default.connect_timeout_s, default.request_timeout_s) == (3.0, 10.0)


def test_enabled_without_bootstrap_is_a_config_error_disabled_is_not() -> None:
    with pytest.raises(ConfigError, match="kafka_bootstrap"):
        install_kafka(engine(), EVENTS, bootstrap=None)
    target = install_kafka(engine(kafka_enabled=False), EVENTS, bootstrap=None)
    assert target.enabled is False


def test_installing_twice_on_one_engine_is_refused() -> None:
    eng = engine()
    install_kafka(eng, EVENTS, bootstrap="h:1")
    with pytest.raises(DuplicateTarget):
        install_kafka(eng, EVENTS, bootstrap="h:1")
