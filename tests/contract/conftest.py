"""Fixtures of the contract suite: the adapter's test kit and an engine over `store`.

Every test here talks only to `jobledger.storage.port.Store` and
`jobledger.engine.Engine`; what differs per adapter (a business row, a second instance
on the same database) comes from the adapter's module in tests/factories.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest

from jobledger.config.settings import Settings
from jobledger.core.clock import FakeClock
from jobledger.engine import Engine
from jobledger.storage.port import Store
from tests.contract.helpers import register_targets


@dataclass(frozen=True)
class Kit:
    """The adapter-specific helpers a factory module provides (tests/factories/__init__)."""

    name: str
    module: ModuleType

    def _hook(self, name: str) -> Any:
        hook = getattr(self.module, name, None)
        if hook is None:
            pytest.skip(f"tests/factories/{self.name}.py has no {name}()")
        return hook

    async def business_write(self, tx: Any, value: str) -> None:
        await self._hook("business_write")(tx, value)

    async def business_count(self, store: Store) -> int:
        count: int = await self._hook("business_count")(store)
        return count

    def peer(self, store: Store) -> AbstractAsyncContextManager[Store]:
        opened: AbstractAsyncContextManager[Store] = self._hook("open_peer")(store)
        return opened


@pytest.fixture
def kit(request: pytest.FixtureRequest, store: Store) -> Kit:
    name = request.node.callspec.params["store"]
    return Kit(name, importlib.import_module(f"tests.factories.{name}"))


@pytest.fixture
def engine(store: Store, clock: FakeClock) -> Engine:
    built = Engine(store, clock=clock, settings=Settings(partitions=store.partitions))
    register_targets(built)
    return built


@pytest.fixture
async def seeded(store: Store) -> AsyncIterator[Store]:
    await store.coordination.seed_partitions(store.partitions)
    yield store
