"""An in-memory store: the unit-test fixture and the reference implementation of the port.

Everything lives in the dictionaries of one `MemoryTables`; each role of the port is a
class of its own over them (`writes.py`, `queue.py`, `coordination.py`, `log.py`,
`admin.py`, `projections.py`), so the contract suite holds for it too.
"""

from __future__ import annotations

from jobledger.storage.feed import LocalFeed, Subscription
from jobledger.storage.memory.admin import MemoryAdmin
from jobledger.storage.memory.coordination import MemoryCoordination
from jobledger.storage.memory.log import MemoryLog, MemoryRetention
from jobledger.storage.memory.projections import MemoryProjections
from jobledger.storage.memory.queue import MemoryQueue
from jobledger.storage.memory.tables import MemoryTables
from jobledger.storage.memory.writes import MemoryWrites
from jobledger.storage.port import Store


class MemoryStore(Store):
    """The port in dictionaries: `tables` holds the data, one object per role works on it."""

    name = "memory"
    writes: MemoryWrites
    queue: MemoryQueue
    coordination: MemoryCoordination
    log: MemoryLog
    admin: MemoryAdmin
    retention: MemoryRetention
    projections: MemoryProjections

    def __init__(self, partitions: int = 64) -> None:
        self.partitions = partitions
        self.tables = tables = MemoryTables()
        self._feed = LocalFeed()
        self.writes = MemoryWrites(tables, self._feed)
        self.queue = MemoryQueue(tables)
        self.coordination = MemoryCoordination(tables)
        self.log = MemoryLog(tables)
        self.admin = MemoryAdmin(tables)
        self.retention = MemoryRetention(tables)
        self.projections = MemoryProjections(tables)

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        self._feed.close()

    def feed(self) -> Subscription:
        return self._feed.subscribe()
