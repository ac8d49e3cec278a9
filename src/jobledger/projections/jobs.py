"""The jobs read model, folded from the log with the domain's own `apply`.

The live `jobs` table is written inline by the store (`Change.row`); this fold
rebuilds the same rows from job streams alone, so `replay` can compare the two and
`replay --apply` can put the rebuilt rows back. Only open jobs (PENDING, RUNNING,
DEAD) are kept; the hash chains are `verify`'s business, not this fold's.
"""

from __future__ import annotations

from jobledger.domain import jobs
from jobledger.domain.events import Event
from jobledger.domain.jobs import Job

JOB_PREFIX = "job:"


class JobsFold:
    """Feed job events in log order; `rows` holds the open jobs by id."""

    def __init__(self) -> None:
        self.rows: dict[str, Job] = {}
        self.problems: list[str] = []

    @staticmethod
    def handles(event: Event) -> bool:
        return event.stream.startswith(JOB_PREFIX)

    def feed(self, event: Event) -> None:
        job_id = event.stream[len(JOB_PREFIX) :]
        try:
            row = jobs.apply(self.rows.get(job_id), event)
        except (ValueError, KeyError) as exc:
            self.problems.append(f"{where_in_log(event)}: cannot fold: {exc}")
            return
        if row is None:
            self.rows.pop(job_id, None)
        else:
            if row.id != job_id:
                self.problems.append(
                    f"{where_in_log(event)}: row id {row.id} does not match the stream"
                )
            self.rows[job_id] = row


def where_in_log(event: Event) -> str:
    """An event as a problem names it (built only when there is a problem)."""
    return f"{event.stream} v{event.version} {event.type} (position {event.position})"
