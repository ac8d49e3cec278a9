"""Configuration: defaults, file, environment, precedence, validation, `jobledger config`."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import pytest

from jobledger.cli import main
from jobledger.config.checks import parse_kafka_target_topics
from jobledger.config.convert import as_int
from jobledger.config.load import describe, explain, load_settings
from jobledger.config.settings import Settings
from jobledger.config.spec import setting, specs
from jobledger.domain.errors import ConfigError
from jobledger.domain.jobs import DeliveryMode

DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "jobledger.toml"
    path.write_text(text)
    return path


def test_defaults_are_the_reference_values() -> None:
    settings = load_settings(env={})
    assert settings == Settings()
    assert settings.partitions == 64 and settings.retry_delays_minutes == (1, 2, 4, 8, 16)
    assert all(source == "default" for _, _, source in explain(env={}))


def test_environment_sets_every_kind_of_value() -> None:
    env = {
        "JOBLEDGER_PARTITIONS": "16",
        "JOBLEDGER_RETRY_DELAYS_MINUTES": "0.5, 1,2",
        "JOBLEDGER_MAX_ATTEMPTS_BY_CODE": "do_update=3,report=1",
        "JOBS_WORKERS": "off",
        "KAFKA_TARGET_TOPICS": "a.b,c-d:at_least_once",
        "JOBLEDGER_LOG_RETENTION_DAYS": "forever",
        "JOBLEDGER_DEFAULT_TIMEZONE": "Asia/Bangkok",
        "JOBLEDGER_LOSSY_REDIS_URL": "redis://127.0.0.1:6379/0",
        "JOBLEDGER_API_KEYS": "k1-aaaaaaaa,k2-bbbbbbbb",
        "JOBLEDGER_KAFKA_TOPIC_OVERRIDES": "do_update_oms=oms.v2",
        "JOBLEDGER_LOG_FORMAT": "JSON",
    }
    s = load_settings(env=env)
    assert s.partitions == 16
    assert s.retry_delays_minutes == (0.5, 1.0, 2.0)
    assert s.max_attempts_by_code == {"do_update": 3, "report": 1}
    assert s.workers is False
    assert s.kafka_target_topics == "a.b,c-d:at_least_once"
    assert s.log_retention_days is None
    assert s.default_timezone == "Asia/Bangkok"
    assert s.lossy_redis_url == "redis://127.0.0.1:6379/0"
    assert s.api_keys == ("k1-aaaaaaaa", "k2-bbbbbbbb")
    assert s.kafka_topic_overrides == {"do_update_oms": "oms.v2"}
    assert s.log_format == "json"


def test_file_then_env_precedence_and_sources(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "partitions = 8\nfast_batch = 50\nretry_delays_minutes = [1, 3]\n"
        "[max_attempts_by_code]\nslow = 2\n",
    )
    env = {"JOBLEDGER_FAST_BATCH": "25", "JOBLEDGER_CONFIG": "/nonexistent.toml"}
    s = load_settings(env=env, file=path)  # an explicit file beats JOBLEDGER_CONFIG
    assert (s.partitions, s.fast_batch, s.long_batch) == (8, 25, 10)
    assert s.retry_delays_minutes == (1, 3) and s.max_attempts_by_code == {"slow": 2}
    sources = {name: source for name, _, source in explain(env=env, file=path)}
    assert sources["partitions"] == f"file:{path}"
    assert sources["fast_batch"] == "env:JOBLEDGER_FAST_BATCH"
    assert sources["long_batch"] == "default"


def test_config_file_from_env_and_jobledger_table(tmp_path: Path) -> None:
    path = write(tmp_path, "[jobledger]\nworkers = false\npause_alert_s = 60\n")
    s = load_settings(env={"JOBLEDGER_CONFIG": str(path)})
    assert s.workers is False and s.pause_alert_s == 60.0


def test_jobledger_name_beats_the_reference_alias() -> None:
    s = load_settings(env={"JOBS_WORKERS": "off", "JOBLEDGER_WORKERS": "on"})
    assert s.workers is True
    rows = {n: src for n, _, src in explain(env={"JOBS_WORKERS": "off"})}
    assert rows["workers"] == "env:JOBS_WORKERS"


@pytest.mark.parametrize(
    ("env", "pattern"),
    [
        (
            {"JOBLEDGER_RETRY_DELAYS_MINUTES": "1,-2"},
            r"retry_delays_minutes \(env JOBLEDGER_RETRY_DELAYS_MINUTES='1,-2'\).*negative",
        ),
        (
            {"JOBLEDGER_PARTITIONS": "many"},
            r"partitions \(env JOBLEDGER_PARTITIONS='many'\).*integer",
        ),
        ({"JOBLEDGER_PARTITIONS": "0"}, r"partitions .*at least 1"),
        ({"JOBLEDGER_HEARTBEAT_S": "nan"}, r"heartbeat_s .*finite"),
        ({"JOBLEDGER_HEARTBEAT_S": "-1"}, r"heartbeat_s .*greater than 0"),
        (
            {"KAFKA_TARGET_TOPICS": "a.b:exactly_once"},
            r"kafka_target_topics \(env KAFKA_TARGET_TOPICS=.*unknown delivery mode 'exactly_once'",
        ),
        ({"KAFKA_TARGET_TOPICS": "bad topic"}, r"not a Kafka topic name"),
        ({"JOBLEDGER_DEFAULT_TIMEZONE": "Mars/Olympus"}, r"default_timezone .*unknown time zone"),
        ({"JOBS_WORKERS": "maybe"}, r"workers \(env JOBS_WORKERS='maybe'\).*on/off"),
        ({"JOBLEDGER_MAX_ATTEMPTS_BY_CODE": "a=0"}, r"max attempts for 'a' must be at least 1"),
        ({"JOBLEDGER_MAX_ATTEMPTS_BY_CODE": "a"}, r"code=attempts"),
        ({"JOBLEDGER_LOSSY_REDIS_URL": "http://x"}, r"lossy_redis_url .*redis://"),
        ({"JOBLEDGER_KAFKA_BOOTSTRAP": "broker"}, r"kafka_bootstrap .*host:port"),
        (
            {"JOBLEDGER_API_KEYS": "short"},
            r"api_keys \(env JOBLEDGER_API_KEYS='\*\*\*'\).*8 characters",
        ),
        ({"JOBLEDGER_API_KEYS": "longenoughkey:superuser"}, r"api_keys .*role 'superuser'"),
        ({"JOBLEDGER_LOG_FORMAT": "xml"}, r"log_format .*text, json"),
        ({"JOBLEDGER_HEARTBEAT_S": "30"}, r"heartbeat_s .*must be shorter than partition_lease_s"),
        ({"JOBLEDGER_LONG_HEARTBEAT_S": "600"}, r"long_heartbeat_s .*shorter than long_lease_s"),
    ],
)
def test_invalid_values_name_the_setting_and_source(env: dict[str, str], pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern):
        load_settings(env=env)


def test_invalid_file_values(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"fast_batch \(file .*key 'fast_batch' = 'ten'\)"):
        load_settings(env={}, file=write(tmp_path, 'fast_batch = "ten"\n'))
    with pytest.raises(
        ConfigError, match=r"unknown setting 'partition'.*did you mean 'partitions'"
    ):
        load_settings(env={}, file=write(tmp_path, "partition = 3\n"))
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(env={}, file=write(tmp_path, "partitions = = 3\n"))
    with pytest.raises(ConfigError, match="not found"):
        load_settings(env={}, file=tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="expected an integer, got a boolean"):
        load_settings(env={}, file=write(tmp_path, "partitions = true\n"))


def test_secrets_are_masked_in_explain_and_errors() -> None:
    env = {
        "JOBLEDGER_API_KEYS": "supersecretkey-1",
        "JOBLEDGER_LOSSY_REDIS_URL": "redis://user:hunter2@127.0.0.1:6379/0",
    }
    rows = {name: value for name, value, _ in explain(env=env)}
    assert rows["api_keys"] == "<1 key>"
    assert rows["lossy_redis_url"] == "redis://user:***@127.0.0.1:6379/0"
    with pytest.raises(ConfigError) as info:
        load_settings(env={"JOBLEDGER_LOSSY_REDIS_URL": "http://u:hunter2@x"})
    assert "hunter2" not in str(info.value)


def test_parse_kafka_target_topics() -> None:
    assert parse_kafka_target_topics(" a.b , c:at_least_once,d:at_most_once,") == [
        ("a.b", DeliveryMode.AT_MOST_ONCE),
        ("c", DeliveryMode.AT_LEAST_ONCE),
        ("d", DeliveryMode.AT_MOST_ONCE),
    ]


def test_cli_prints_values_and_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for var in [v for v in os.environ if v.startswith(("JOBLEDGER_", "JOBS_", "KAFKA_"))]:
        monkeypatch.delenv(var)
    path = write(tmp_path, "long_batch = 4\n")
    monkeypatch.setenv("JOBS_WORKERS", "off")
    assert main(["--config", str(path), "config"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^long_batch\s+4\s+file:", out, re.M)
    assert re.search(r"^workers\s+off\s+env:JOBS_WORKERS$", out, re.M)
    assert re.search(r"^partitions\s+64\s+default$", out, re.M)
    assert main(["config", "--json", "--config", str(path)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {"name": "long_batch", "value": 4, "source": f"file:{path}"} in rows


def test_cli_exits_2_on_invalid_config(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("JOBLEDGER_DEFAULT_TIMEZONE", "Nowhere/Land")
    assert main(["config"]) == 2
    captured = capsys.readouterr()
    assert "default_timezone" in captured.err and "Nowhere/Land" in captured.err
    assert captured.out == ""


def test_every_setting_is_documented() -> None:
    text = DOCS.read_text()
    for name, env, _default, _ in describe():
        assert f"`{name}`" in text, name
        for var in env:
            assert f"`{var}`" in text, var
    assert {f.name for f in dataclasses.fields(Settings)} == {row[0] for row in describe()}


def test_a_setting_without_its_spec_is_named() -> None:
    @dataclasses.dataclass(frozen=True)
    class Partial:
        known: int = dataclasses.field(default=1, metadata=setting(as_int, None, "A number."))
        forgotten: int = 2

    with pytest.raises(TypeError, match=r"Partial\.forgotten needs metadata=setting"):
        specs(Partial)
    (known,) = specs(Settings)[:1]
    assert known.name == "partitions" and known.env == ("JOBLEDGER_PARTITIONS",)
