"""The in-memory store (see store.py): the unit-test fixture and the port's reference."""

from jobledger.storage.memory.store import MemoryStore
from jobledger.storage.memory.writes import MemoryTx

__all__ = ["MemoryStore", "MemoryTx"]
