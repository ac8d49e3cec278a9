"""Shared by the audit commands (replay, verify, export, migrate): open the store named
by `--store` (or JOBLEDGER_STORE), run one coroutine on it, close it."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from jobledger.domain.errors import InvalidArgument
from jobledger.domain.timeutil import at_ms
from jobledger.storage.port import Store
from jobledger.storage.urls import open_store, store_url


def run_on_store(args: argparse.Namespace, work: Callable[[Store], Awaitable[int]]) -> int:
    async def main() -> int:
        store = open_store(store_url(getattr(args, "store", None)))
        await store.open()
        try:
            return await work(store)
        finally:
            await store.close()

    return asyncio.run(main())


def parse_time(text: str) -> datetime:
    """An ISO 8601 time for --since/--until; a time without an offset is read as UTC."""
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidArgument(f"not an ISO 8601 time: {text!r}") from exc
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return at_ms(value)


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value
