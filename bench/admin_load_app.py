"""The application `bench/admin_load.py` runs under `jobledger serve` / `jobledger worker`:
a no-op at-least-once fast-lane target the worker drains, and a long-lane target whose
jobs are due tomorrow (the backlog that makes the jobs table large)."""

from __future__ import annotations

from jobledger import App
from jobledger.domain.jobs import Job

app = App()


@app.target("bench:noop", lane="fast", delivery_mode="at_least_once")
async def noop(job: Job) -> None:
    return None


@app.target("bench:later", lane="long")
async def later(job: Job) -> None:
    return None
