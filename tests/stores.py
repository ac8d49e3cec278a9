"""The adapters the contract suite runs on. Each name is a module of tests.factories."""

from __future__ import annotations

import importlib
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from jobledger.domain.jobs import Job
from jobledger.storage.port import Store

ADAPTERS = ["memory", "sqlite", "postgres", "mongodb"]


def factory(name: str) -> Any:
    return importlib.import_module(f"tests.factories.{name}").make_store


def make_store(
    name: str, tmp_path: Path, partitions: int = 64
) -> AbstractAsyncContextManager[Store]:
    maker = factory(name)
    result: AbstractAsyncContextManager[Store] = maker(tmp_path, partitions)
    return result


async def all_jobs(store: Store) -> list[Job]:
    """Every job row of `store`, by id: what a test checks after the lanes ran. Read by
    the store's own factory module (`tests.factories.<name>.all_jobs`), not through the
    port: no caller of the engine needs every row at once."""
    rows: list[Job] = await importlib.import_module(f"tests.factories.{store.name}").all_jobs(store)
    return rows
