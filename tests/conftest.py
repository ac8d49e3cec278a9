"""Shared fixtures: the injected clock, and `store`, parametrised over every adapter."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from jobledger.core.clock import FakeClock
from jobledger.storage.port import Store
from tests.stores import ADAPTERS, make_store


def _available(name: str) -> bool:
    return importlib.util.find_spec(f"tests.factories.{name}") is not None


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))


@pytest.fixture(params=[a for a in ADAPTERS if _available(a)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """An opened, empty store of each adapter in turn (the contract suite's fixture)."""
    async with make_store(request.param, tmp_path) as opened:
        yield opened


@pytest.fixture
async def memory_store(tmp_path: Path) -> AsyncIterator[Store]:
    async with make_store("memory", tmp_path) as opened:
        yield opened


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Say up front which servers the adapter suites will run against."""
    from tests.factories.mongodb import SKIP_REASON, mongo_uri

    lines = []
    if os.environ.get("JOBLEDGER_TEST_MONGO_URI"):
        lines.append(f"MongoDB: {os.environ['JOBLEDGER_TEST_MONGO_URI']}")
    elif mongo_uri() is None:
        lines.append(SKIP_REASON)
    return lines
