"""The adapters the contract suite runs on. Each name is a module of tests.factories."""

from __future__ import annotations

import importlib
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

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
