"""What a failed chaos run keeps: <workdir>/evidence, written before the store goes away.

summary.txt first (whatever follows may fail), then the records the recorder read, the
workers' ack log, the faults injected, the log and the job rows, and on PostgreSQL a pg_dump of the run's
database. `python -m tests.chaos.reanalyse <evidence>` runs the checks on it again.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

from jobledger.projections.audit import export_log
from jobledger.storage.port import Store
from jobledger.storage.rows import job_to_dict
from tests.chaos.faults import Faults
from tests.chaos.record import Recorder
from tests.chaos.summary import Summary
from tests.private_pg import PrivateCluster
from tests.stores import all_jobs


async def keep_evidence(
    summary: Summary,
    store: Store,
    recorder: Recorder,
    faults: Faults,
    cluster: PrivateCluster | None,
    database: str,
    workdir: Path,
) -> None:
    """Write what a failed run saw into <workdir>/evidence before the store goes away."""
    folder = workdir / "evidence"
    folder.mkdir(exist_ok=True)
    summary.evidence = str(folder)
    (folder / "summary.txt").write_text(summary.table() + "\n")  # first: whatever follows
    with (folder / "records.jsonl").open("w") as out:
        for r in recorder.records:
            out.write(json.dumps(dataclasses.asdict(r), default=str) + "\n")
    if (workdir / "acks.jsonl").exists():  # the workers' ack log (tests/chaos/acks.py)
        shutil.copy(workdir / "acks.jsonl", folder / "acks.jsonl")
    with (folder / "faults.jsonl").open("w") as out:
        for hit in faults.hits:
            pods = sorted(hit.pods) if hit.pods is not None else None
            out.write(json.dumps({**dataclasses.asdict(hit), "pods": pods}, default=str) + "\n")
    try:
        with (folder / "events.jsonl").open("w") as out:
            await export_log(store, out)
        with (folder / "jobs.jsonl").open("w") as out:
            for job in await all_jobs(store):
                out.write(json.dumps(job_to_dict(job), default=str) + "\n")
    except Exception as exc:
        summary.problem(f"evidence: reading the store failed ({exc!r})")
    if cluster is not None:
        dump = subprocess.run(
            [
                str(cluster.bin_dir / "pg_dump"),
                "-d",
                cluster.url(database),
                "-f",
                str(folder / "db.sql"),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if dump.returncode != 0:
            summary.problem(f"evidence: pg_dump failed: {dump.stderr.strip()[:200]}")
    (folder / "summary.txt").write_text(summary.table() + "\n")
    print(f"chaos run FAILED: evidence kept in {folder}", flush=True)
