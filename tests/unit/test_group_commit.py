"""Group commit (reactors/commit.py): calls share commits, whole calls, up to a size."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from jobledger.config.settings import Settings
from jobledger.core.clock import FakeClock
from jobledger.domain.jobs import Change, NewJob
from jobledger.engine import Engine
from jobledger.reactors.commit import GroupCommitter
from jobledger.storage.memory import MemoryStore
from jobledger.storage.memory.writes import MemoryWrites
from jobledger.storage.port import LeaseGuard
from tests.stores import all_jobs


class CountingWrites(MemoryWrites):
    """The memory store's writes, noting the size of every `apply`."""

    sizes: list[int]

    async def apply(
        self, changes: Sequence[Change], *, guard: LeaseGuard | None = None
    ) -> list[bool]:
        self.sizes.append(len(changes))
        return await super().apply(changes, guard=guard)


class CountingStore(MemoryStore):
    """The memory store, noting the size of every `apply`."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = CountingWrites(self.tables, self.writes.wakes)
        self.sizes: list[int] = []
        self.writes.sizes = self.sizes


def new_jobs(engine: Engine, count: int, prefix: str) -> list[Change]:
    items = [NewJob("t", None, key=f"{prefix}{i}") for i in range(count)]
    return list(engine.plan_enqueue(items, tx=None).changes)


async def test_calls_share_commits_up_to_the_size_never_split() -> None:
    store = CountingStore()
    await store.open()
    clock = FakeClock()
    engine = Engine(store, clock=clock, settings=Settings())
    engine.targets.register("t", "fast", lambda job: None)
    committer = GroupCommitter(store, clock, "pod-a", max_changes=1000)
    calls = [new_jobs(engine, n, f"c{c}-") for c, n in enumerate([400, 400, 400, 1500, 10])]
    results = await asyncio.gather(*(committer.commit(c, [False] * len(c)) for c in calls))
    assert [len(r) for r in results] == [400, 400, 400, 1500, 10]
    assert all(all(r) for r in results)
    # oldest first, whole calls: 400+400, then 400 (a call of 1,500 would pass the size),
    # the 1,500 alone, then the 10
    assert store.sizes == [800, 400, 1500, 10]
    assert committer.commits == 4
    assert len(await all_jobs(store)) == 2710
    await store.close()


async def workers_committing(gather_turns: int) -> list[int]:
    """Four workers, each committing one change, then computing its next round for two
    loop turns, eight rounds each, the first one a turn ahead of the others; the size
    of every commit."""
    store = CountingStore()
    await store.open()
    clock = FakeClock()
    engine = Engine(store, clock=clock, settings=Settings())
    engine.targets.register("t", "fast", lambda job: None)
    committer = GroupCommitter(store, clock, "pod-a", gather_turns=gather_turns)

    async def worker(w: int) -> None:
        if w:
            await asyncio.sleep(0)
        for r in range(8):
            change = new_jobs(engine, 1, f"w{w}-r{r}-")
            assert await committer.commit(change, [False]) == [True]
            for _ in range(2):  # the next round: run, judge, plan
                await asyncio.sleep(0)

    await asyncio.gather(*(worker(w) for w in range(4)))
    await store.close()
    return store.sizes


async def test_a_gathering_writer_waits_for_the_workers_it_answered() -> None:
    # without gathering the workers split into groups that take turns
    apart = await workers_committing(0)
    assert max(apart) < 4
    # gathering: once the four are in step, every commit holds all four, and never
    # waits for a worker that does not come back (each one's last round)
    together = await workers_committing(8)
    assert sum(together) == 32
    assert together[-7:] == [4] * 7
    assert len(together) < len(apart)
