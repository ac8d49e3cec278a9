"""The PostgreSQL schema a store URL names (storage/pg_url.py): pure text work."""

from __future__ import annotations

import pytest

from jobledger.domain.errors import ConfigError
from jobledger.storage.postgres.url import split_schema, store_schema

BASE = "postgresql://app:secret@db:5432/shop"


@pytest.mark.parametrize(
    ("url", "dsn", "schema"),
    [
        (BASE, BASE, None),
        (f"{BASE}?schema=billing", BASE, "billing"),
        (f"{BASE}?sslmode=disable&schema=billing", f"{BASE}?sslmode=disable", "billing"),
        (
            f"{BASE}?options=-csearch_path%3Dbilling",
            f"{BASE}?options=-csearch_path%3Dbilling",
            "billing",
        ),
        (
            f"{BASE}?options=-c%20search_path%3Dbilling%2Cpublic",
            f"{BASE}?options=-c%20search_path%3Dbilling%2Cpublic",
            "billing",
        ),
        (
            f"{BASE}?options=--search-path%3Dbilling",
            f"{BASE}?options=--search-path%3Dbilling",
            "billing",
        ),
        (
            f"{BASE}?options=-c%20statement_timeout%3D5s",
            f"{BASE}?options=-c%20statement_timeout%3D5s",
            None,
        ),
        (
            # the same schema both ways; the kept options are re-quoted for libpq (%20, not +)
            f"{BASE}?options=-c search_path=billing&schema=billing",
            f"{BASE}?options=-c%20search_path%3Dbilling",
            "billing",
        ),
    ],
)
def test_the_schema_a_url_names(url: str, dsn: str, schema: str | None) -> None:
    assert split_schema(url) == (dsn, schema)


def test_two_schemas_in_one_url_are_refused() -> None:
    with pytest.raises(ConfigError, match="names two schemas"):
        split_schema(f"{BASE}?schema=a&options=-csearch_path%3Db")


def test_the_url_and_the_setting() -> None:
    assert store_schema(BASE, "billing") == (BASE, "billing")
    assert store_schema(f"{BASE}?schema=billing", None) == (BASE, "billing")
    assert store_schema(f"{BASE}?schema=billing", "billing") == (BASE, "billing")
    assert store_schema(BASE, None) == (BASE, None)
    with pytest.raises(ConfigError, match="schema 'a', the postgres_schema setting 'b'"):
        store_schema(f"{BASE}?schema=a", "b")


@pytest.mark.parametrize(
    "url",
    [
        f"{BASE}?schema=billing%0A",  # "$" matches before a trailing newline
        f"{BASE}?schema=b%22%3B%20DROP%20SCHEMA%20public%3B%20--",
        f"{BASE}?options=-c%20search_path%3D%22billing",  # an unbalanced quote
    ],
)
def test_a_schema_name_that_is_not_a_plain_identifier_is_one_config_error(url: str) -> None:
    from jobledger.storage.urls import open_store

    with pytest.raises(ConfigError, match="PostgreSQL"):
        open_store(url)


def test_a_kafka_topic_with_a_trailing_newline_is_refused() -> None:
    from jobledger.config.checks import check_code_topics

    assert check_code_topics({"c": "orders\n"}) is not None
