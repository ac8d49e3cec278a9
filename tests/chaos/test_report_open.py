"""A run that did not drain names who holds the open rows' partitions at that moment
(the evidence dump comes after every pod released its leases, so it cannot show it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from jobledger.core.clock import FakeClock
from jobledger.domain.jobs import Lane
from jobledger.storage.memory import MemoryStore
from tests.builders import make_engine
from tests.chaos.harness import Config, report_open
from tests.chaos.summary import Summary
from tests.contract.lanes_kit import enqueue


async def test_an_undrained_run_reports_the_lease_of_each_open_partition(
    tmp_path: Path,
) -> None:
    now = datetime.now(UTC)
    store = MemoryStore()
    await store.coordination.seed_partitions(store.partitions)
    engine = make_engine(store, FakeClock(now))

    async def nothing(job: object) -> None:
        return None

    engine.targets.register("kafka:chaos.alo", Lane.FAST, nothing)
    (job_id,) = await enqueue(engine, "kafka:chaos.alo", [{"payload": {"n": 1}, "key": "k1"}])
    job = await store.admin.get_job(job_id)
    assert job is not None
    taken = await store.coordination.take_partitions(
        [job.partition], "w9", now, now + timedelta(seconds=4)
    )
    assert taken == [job.partition]

    summary = Summary("memory")
    await report_open(summary, store, Config("postgres", 1, 1.0, tmp_path))

    lease_lines = [p for p in summary.problems if p.startswith("lease of open partition")]
    assert lease_lines == [
        f"lease of open partition {job.partition}: owner=w9 (live=False)"
        f" until={now + timedelta(seconds=4)}"
    ]
    assert any(p.startswith("open: ") for p in summary.problems)
    assert not summary.ok
