"""Analyse a failed chaos run again from its evidence folder, without the database.

    python -m tests.chaos.reanalyse /path/to/workdir/evidence

Reads events.jsonl (the log), records.jsonl (what the recorder read), faults.jsonl
(the faults injected) and, when the run kept it, acks.jsonl (the workers' ack log, which
names the cause of a lost job) and runs the same `analyse` as the run did. The business rows are
gone with the database: every enqueued job's own row is assumed present, so this
cannot find a business row without its job (the run's own summary.txt says that).
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from jobledger.domain.timeutil import parse_iso
from tests.chaos.acks import AckIndex, load_acks
from tests.chaos.checks import JobTrail, analyse, fold
from tests.chaos.record import Delivered, broker_order
from tests.chaos.summary import FaultHit, Summary


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def reanalyse(folder: Path) -> Summary:
    trails: dict[str, JobTrail] = {}
    for raw in lines(folder / "events.jsonl"):
        fold(trails, SimpleNamespace(**{**raw, "at": parse_iso(raw["at"])}))  # type: ignore[arg-type]
    records = broker_order([Delivered(**raw) for raw in lines(folder / "records.jsonl")])
    hits = [
        FaultHit(
            raw["name"],
            datetime.fromisoformat(raw["at"]),
            datetime.fromisoformat(raw["until"]),
            frozenset(raw["pods"]) if isinstance(raw["pods"], list) else None,
        )
        for raw in lines(folder / "faults.jsonl")
    ]
    business = {
        (t.key, t.version)
        for t in trails.values()
        if t.target.startswith("kafka:") and t.key is not None
    }
    summary = Summary("reanalysed")
    kept = folder / "acks.jsonl"  # runs before the ack log have none: no cause then
    acks = AckIndex(load_acks(kept), records) if kept.exists() else None
    analyse(summary, business, trails, records, None, [], hits, acks)
    return summary


if __name__ == "__main__":
    print(reanalyse(Path(sys.argv[1])).table())
