"""The memory store's projection state: checkpoints and the rebuilt read models."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from jobledger.domain.jobs import Job
from jobledger.domain.schedules.row import Schedule
from jobledger.storage.memory.tables import MemoryTables
from jobledger.storage.port import ProjectionState


class MemoryProjections(ProjectionState):
    def __init__(self, tables: MemoryTables) -> None:
        self.tables = tables

    async def load_checkpoint(self, name: str) -> tuple[int, Any]:
        position, state = self.tables.checkpoints.get(name, (0, None))
        return position, copy.deepcopy(state)

    async def save_checkpoint(self, name: str, position: int, state: Any) -> None:
        self.tables.checkpoints[name] = (position, copy.deepcopy(state))

    async def replace_read_models(self, jobs: Sequence[Job], schedules: Sequence[Schedule]) -> None:
        self.tables.replace_jobs(jobs)
        self.tables.schedules = {s.code: s for s in schedules}
