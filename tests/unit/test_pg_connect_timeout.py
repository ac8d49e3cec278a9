"""A PostgreSQL store's connections give up connecting after CONNECT_TIMEOUT_S unless the
DSN names its own `connect_timeout` (libpq would otherwise wait ~130 s on a server that
never answers, past a stopping pod's deadline)."""

from __future__ import annotations

import pytest

psycopg = pytest.importorskip("psycopg")

from psycopg.conninfo import conninfo_to_dict  # noqa: E402

from jobledger.storage.postgres.connections import CONNECT_TIMEOUT_S, bounded_connect  # noqa: E402


@pytest.mark.parametrize(
    "dsn", ["postgresql://app@127.0.0.1:5432/orders", "host=127.0.0.1 dbname=orders user=app"]
)
def test_a_dsn_without_a_connect_timeout_gets_the_default(dsn: str) -> None:
    given = conninfo_to_dict(dsn)
    bounded = conninfo_to_dict(bounded_connect(dsn))
    assert bounded.pop("connect_timeout") == str(CONNECT_TIMEOUT_S)
    assert bounded == given


def test_the_dsn_s_own_connect_timeout_wins() -> None:
    dsn = "postgresql://app@127.0.0.1:5432/orders?connect_timeout=2"
    assert conninfo_to_dict(bounded_connect(dsn))["connect_timeout"] == "2"
