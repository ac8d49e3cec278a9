"""Fixtures the PostgreSQL integration tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobledger.storage.postgres import PostgresStore
from tests.factories.postgres import make_store


@pytest.fixture
async def pg(tmp_path: Path) -> AsyncIterator[PostgresStore]:
    """A PostgreSQL store on a fresh schema of the test server (default pool)."""
    async with make_store(tmp_path) as store:
        assert isinstance(store, PostgresStore)
        yield store
