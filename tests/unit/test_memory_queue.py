"""The memory store's queue index: sorted (order key, version, id) per partition, rows
that left dropped by the next read that meets them. Whatever the order of writes and
reads, `fast_pending` lists exactly the PENDING fast rows, each once."""

from __future__ import annotations

from jobledger.config.settings import Settings
from jobledger.core.clock import FakeClock
from jobledger.domain import job_commands
from jobledger.domain.jobs import Job, Stamp
from jobledger.engine import Engine
from jobledger.storage.memory import MemoryStore
from tests.contract.helpers import FAST, enqueue, kill, register_targets, succeed
from tests.stores import all_jobs


async def listed(store: MemoryStore) -> list[str]:
    return [job.id for job in await store.queue.fast_pending(0, after_key=None, limit=100)]


async def retry(store: MemoryStore, clock: FakeClock, job: Job) -> None:
    row = await store.admin.get_job(job.id)
    assert isinstance(row, Job)
    assert await store.writes.apply([job_commands.retry(row, Stamp(clock.now()))]) == [True]


async def test_rows_that_leave_and_come_back_are_listed_once() -> None:
    clock = FakeClock()
    store = MemoryStore(partitions=1)
    engine = Engine(store, clock=clock, settings=Settings(partitions=1))
    register_targets(engine)
    rows = [
        await enqueue(engine, FAST, key=f"k{n % 3}", version=n, dedupe_key=f"d{n}")
        for n in range(9)
    ]
    order = [j.id for j in sorted(rows, key=lambda j: (j.order_key, j.version, j.id))]
    assert await listed(store) == order

    done, dead_read, dead_unread = rows[0], rows[1], rows[2]  # keys k0, k1, k2
    assert await store.writes.apply([succeed(done, clock), kill(dead_read, clock)]) == [True, True]
    # a keyset page past k0 meets (and drops) the dead k1 row's entry
    after = await store.queue.fast_pending(0, after_key="k0", limit=100)
    assert dead_read.id not in [j.id for j in after] and len(after) == 5
    assert await listed(store) == [i for i in order if i not in (done.id, dead_read.id)]
    # killed and retried with no read in between: its entry never left
    assert await store.writes.apply([kill(dead_unread, clock)]) == [True]
    await retry(store, clock, dead_unread)
    await retry(store, clock, dead_read)
    assert await listed(store) == [i for i in order if i != done.id]
    assert [j.id for j in await store.queue.fast_pending(0, after_key=None, limit=2)] == order[1:3]

    # the read models replaced (replay): the index is rebuilt from the rows
    await store.projections.replace_read_models(await all_jobs(store), [])
    assert await listed(store) == [i for i in order if i != done.id]
